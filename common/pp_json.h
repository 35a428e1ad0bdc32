/* pp_json.h — JSON numbers written so that they read back exactly: one rule for ppc (the
 * hf-config it records) and ppr (config.json, the checkpoint index, trainer_state.json). */
#ifndef PP_JSON_H
#define PP_JSON_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* Every real of v (in objects and arrays, at any depth) reads back from prec significant digits. */
static inline int pp_json_reads_back(const json_t *v, int prec) {
  if (json_is_real(v)) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.*g", prec, json_real_value(v));
    return strtod(buf, NULL) == json_real_value(v);
  }
  const char *key;
  json_t *x;
  size_t i;
  if (json_is_object(v)) json_object_foreach((json_t *)v, key, x) if (!pp_json_reads_back(x, prec)) return 0;
  if (json_is_array(v)) json_array_foreach(v, i, x) if (!pp_json_reads_back(x, prec)) return 0;
  return 1;
}

/* The fewest significant digits, 15 to 17, with which every real of v reads back (for
 * JSON_REAL_PRECISION); 15 for NULL. */
static inline int pp_json_precision(const json_t *v) {
  int prec = 15;
  while (prec < 17 && v && !pp_json_reads_back(v, prec)) prec++;
  return prec;
}

#endif /* PP_JSON_H */
