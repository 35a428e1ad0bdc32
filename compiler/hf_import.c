/* hf_import.c — ppc --from-hf: a readable .pdl from a Hugging Face config.json.
 *
 * The config is parsed with jansson, each field the model needs is read with its type checked
 * (transformers' defaults where the config class has one and the field is absent or null), options
 * the language cannot express are refused by name, and the .pdl is written in the structure and
 * with the checkpoint names of examples/tiny.pdl (Llama, Qwen2, Qwen3, MiniMind, Mistral; Phi-3 with its
 * fused q/k/v and gate/up projections cut by chunk; Gemma with its scaled embedding, (1 + w) norms and
 * GeGLU; Gemma 2 with its soft caps, norms after attention and the MLP, and alternating windows) or
 * examples/gpt2.pdl (GPT-2). Its header records the architecture and the config as read
 * (re-serialised compactly with sorted keys) in the machine-readable comments `# hf-architecture:`
 * and `# hf-config:`. docs/language.md, "Importing a Hugging Face config", is the reference. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pp_json.h"
#include "ppc.h"

/* ORDER HfArch: hf_archs */
typedef enum HfArch {
  HF_LLAMA,
  HF_QWEN2,
  HF_QWEN3,
  HF_MINIMIND,
  HF_MISTRAL,
  HF_PHI3,
  HF_GEMMA,
  HF_GEMMA2,
  HF_GPT2
} HfArch;

static const struct {
  const char *arch, *type; /* architectures[0] and model_type */
} hf_archs[] = {
    {"LlamaForCausalLM", "llama"},       {"Qwen2ForCausalLM", "qwen2"},     {"Qwen3ForCausalLM", "qwen3"},
    {"MiniMindForCausalLM", "minimind"}, {"MistralForCausalLM", "mistral"}, {"Phi3ForCausalLM", "phi3"},
    {"GemmaForCausalLM", "gemma"},       {"Gemma2ForCausalLM", "gemma2"},   {"GPT2LMHeadModel", "gpt2"},
};
#define HF_NARCH ((int)(sizeof hf_archs / sizeof hf_archs[0]))

/* The model as the config describes it. */
typedef struct Hf {
  const char *path; /* the config file, for messages */
  json_t *cfg;
  HfArch arch;
  bool bad; /* a field was reported */
  int64_t hidden, ffn, layers, heads, kv_heads, head_dim, vocab, max_pos;
  double eps, theta, std;
  bool tied;
  bool qkv_bias, o_bias, mlp_bias; /* Llama-like: biases of q/k/v, o, and the MLP */
  bool qk_norm;                    /* Qwen3, MiniMind: RMSNorm of each q and k head */
  bool scale_attn;                 /* GPT-2: scale_attn_weights (false: scale 1) */
  bool llama3;                     /* rope_scaling {"rope_type": "llama3", ...} */
  double factor, low_freq, high_freq;
  int64_t orig_max_pos;
  int64_t window; /* Mistral, Phi-3: sliding_window (0: null, every position) */
  bool fused;     /* Phi-3: one qkv_proj and one gate_up_proj */
  bool gemma;     /* Gemma, Gemma 2: embeddings times sqrt(hidden), norms by (1 + w), GeGLU (tanh GELU) */
  bool gemma2;    /* Gemma 2: norms after attention and the MLP, windows on even layers, soft caps */
  double attn_cap, logit_cap, qpas; /* Gemma 2: the scores' and logits' soft caps (0: none), query_pre_attn_scalar */
} Hf;

/* ---- reading fields ------------------------------------------------------------------------ */

/* The shortest %g that reads back as v (at most 17 digits). */
static void fmt_num(char *buf, size_t n, double v) {
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return;
  }
}

/* What a JSON value is, for "got ...". */
static void describe(char *buf, size_t n, const json_t *v) {
  char num[32];
  if (!v) snprintf(buf, n, "nothing (the field is missing)");
  else if (json_is_null(v)) snprintf(buf, n, "null");
  else if (json_is_true(v)) snprintf(buf, n, "true");
  else if (json_is_false(v)) snprintf(buf, n, "false");
  else if (json_is_integer(v)) snprintf(buf, n, "the integer %lld", (long long)json_integer_value(v));
  else if (json_is_real(v)) {
    fmt_num(num, sizeof num, json_real_value(v));
    snprintf(buf, n, "the number %s", num);
  } else if (json_is_string(v)) {
    char s[64];
    size_t i = 0;
    for (const char *p = json_string_value(v); *p && i < sizeof s - 4; p++)
      s[i++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    if (strlen(json_string_value(v)) > i) s[i++] = '.', s[i++] = '.', s[i++] = '.';
    s[i] = 0;
    snprintf(buf, n, "the string \"%s\"", s);
  } else snprintf(buf, n, json_is_array(v) ? "an array" : "an object");
}

static void field_err(Hf *h, const char *field, const char *expected, const json_t *got) {
  char g[128];
  describe(g, sizeof g, got);
  fprintf(stderr, "ppc: error: %s: field '%s': expected %s, got %s\n", h->path, field, expected, g);
  h->bad = true;
}

/* The field key of obj (in the object named prefix, "" for the top), NULL when absent; a null
 * counts as absent where the field has a default. */
static json_t *field(json_t *obj, const char *key, bool optional) {
  json_t *v = json_object_get(obj, key);
  return optional && json_is_null(v) ? NULL : v;
}

static void field_name(char *buf, size_t n, const char *prefix, const char *key) {
  snprintf(buf, n, "%s%s%s", prefix, *prefix ? "." : "", key);
}

/* A positive integer; def < 0: required. */
static int64_t get_int(Hf *h, json_t *obj, const char *prefix, const char *key, int64_t def) {
  json_t *v = field(obj, key, def >= 0);
  if (!v && def >= 0) return def;
  if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= PP_MAX_NUMEL)
    return (int64_t)json_integer_value(v);
  char name[96];
  field_name(name, sizeof name, prefix, key);
  field_err(h, name, "a positive integer", v);
  return 1;
}

/* A positive finite number (integer or real); def < 0: required. */
static double get_num(Hf *h, json_t *obj, const char *prefix, const char *key, double def) {
  json_t *v = field(obj, key, def >= 0);
  if (!v && def >= 0) return def;
  if (json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) > 0) return json_number_value(v);
  char name[96];
  field_name(name, sizeof name, prefix, key);
  field_err(h, name, "a positive number", v);
  return 1;
}

static bool get_bool(Hf *h, json_t *obj, const char *key, bool def) {
  json_t *v = field(obj, key, true);
  if (!v) return def;
  if (json_is_boolean(v)) return json_is_true(v);
  field_err(h, key, "true or false", v);
  return def;
}

/* An option the language cannot express: the field must be absent, null or `ok`. */
static void want_bool(Hf *h, json_t *obj, const char *key, bool ok, const char *why) {
  json_t *v = field(obj, key, true);
  if (!v) return;
  char exp[160];
  snprintf(exp, sizeof exp, "%s (%s)", ok ? "true" : "false", why);
  if (!json_is_boolean(v) || json_is_true(v) != ok) field_err(h, key, exp, v);
}

/* A string field that must be one of the (NULL-terminated) accepted values; absent or null: the
 * first. Returns the index of the value. */
static int want_str(Hf *h, json_t *obj, const char *prefix, const char *key, const char *const *accepted,
                    const char *expected) {
  json_t *v = field(obj, key, true);
  if (!v) return 0;
  for (int i = 0; json_is_string(v) && accepted[i]; i++)
    if (!strcmp(json_string_value(v), accepted[i])) return i;
  char name[96];
  field_name(name, sizeof name, prefix, key);
  field_err(h, name, expected, v);
  return 0;
}

/* ---- the architectures --------------------------------------------------------------------- */

/* architectures[0], or model_type when there is no architectures. 0, or 1 after reporting. */
static int read_arch(Hf *h) {
  json_t *archs = json_object_get(h->cfg, "architectures"), *type = json_object_get(h->cfg, "model_type");
  char list[256] = "";
  for (int i = 0; i < HF_NARCH; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", hf_archs[i].arch);
  if (archs && !json_is_null(archs)) {
    json_t *a0 = json_array_get(archs, 0);
    if (!json_is_array(archs) || !json_is_string(a0)) {
      field_err(h, "architectures", "an array of strings", json_is_array(archs) ? a0 : archs);
      return 1;
    }
    for (int i = 0; i < HF_NARCH; i++)
      if (!strcmp(json_string_value(a0), hf_archs[i].arch)) h->arch = (HfArch)i;
    if (strcmp(json_string_value(a0), hf_archs[h->arch].arch)) {
      char exp[300];
      snprintf(exp, sizeof exp, "one of %s", list);
      field_err(h, "architectures[0]", exp, a0);
      return 1;
    }
    if (type && !json_is_null(type) &&
        (!json_is_string(type) || strcmp(json_string_value(type), hf_archs[h->arch].type))) {
      char exp[96];
      snprintf(exp, sizeof exp, "\"%s\" (for %s)", hf_archs[h->arch].type, hf_archs[h->arch].arch);
      field_err(h, "model_type", exp, type);
      return 1;
    }
    return 0;
  }
  for (int i = 0; json_is_string(type) && i < HF_NARCH; i++)
    if (!strcmp(json_string_value(type), hf_archs[i].type)) {
      h->arch = (HfArch)i;
      return 0;
    }
  char exp[300] = "one of ";
  for (int i = 0; i < HF_NARCH; i++)
    snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s\"%s\"", i ? ", " : "", hf_archs[i].type);
  strcat(exp, " (or an architectures list)");
  field_err(h, "model_type", exp, type);
  return 1;
}

/* rope_scaling: null, {"rope_type": "default"}, or Llama-3's {"rope_type": "llama3", ...}
 * ("type" is the older spelling of "rope_type"). */
static void read_rope_scaling(Hf *h) {
  json_t *rs = field(h->cfg, "rope_scaling", true);
  if (!rs) return;
  if (!json_is_object(rs)) {
    field_err(h, "rope_scaling", "null or an object", rs);
    return;
  }
  const char *key = json_object_get(rs, "rope_type") ? "rope_type" : "type";
  json_t *t = json_object_get(rs, key);
  static const char *const types[] = {"llama3", "default", NULL};
  if (!t) {
    field_err(h, "rope_scaling.rope_type", "\"llama3\" or \"default\"", t);
    return;
  }
  if (want_str(h, rs, "rope_scaling", key, types, "\"llama3\" or \"default\" (other RoPE scalings are not supported)"))
    return; /* default: plain RoPE */
  if (h->bad) return;
  h->llama3 = true;
  h->factor = get_num(h, rs, "rope_scaling", "factor", -1);
  h->low_freq = get_num(h, rs, "rope_scaling", "low_freq_factor", -1);
  h->high_freq = get_num(h, rs, "rope_scaling", "high_freq_factor", -1);
  h->orig_max_pos = get_int(h, rs, "rope_scaling", "original_max_position_embeddings", -1);
  if (!h->bad && h->high_freq <= h->low_freq) {
    char exp[96], lf[32];
    fmt_num(lf, sizeof lf, h->low_freq);
    snprintf(exp, sizeof exp, "a number greater than low_freq_factor (%s)", lf);
    field_err(h, "rope_scaling.high_freq_factor", exp, json_object_get(rs, "high_freq_factor"));
  }
}

/* A number field whose default is def when absent and that is off (0) when null */
static double num_or_null(Hf *h, json_t *c, const char *key, double def) {
  json_t *v = json_object_get(c, key);
  return !v ? def : json_is_null(v) ? 0 : get_num(h, c, "", key, -1);
}

/* Gemma 2's fields beside Gemma's, with Gemma2Config's defaults */
static void read_gemma2(Hf *h) {
  json_t *c = h->cfg;
  json_t *sw = json_object_get(c, "sliding_window");
  h->window = !sw ? 4096 : json_is_null(sw) ? 0 : get_int(h, c, "", "sliding_window", -1);
  h->qpas = get_num(h, c, "", "query_pre_attn_scalar", 224);
  h->attn_cap = num_or_null(h, c, "attn_logit_softcapping", 50);
  h->logit_cap = num_or_null(h, c, "final_logit_softcapping", 30);
}

/* Llama, Qwen2, Qwen3, MiniMind, Mistral, Phi-3: transformers' config classes' defaults (MiniMind:
 * its MiniMindConfig's) where a field is optional. */
static void read_llama_like(Hf *h) {
  json_t *c = h->cfg;
  bool mm = h->arch == HF_MINIMIND, mistral = h->arch == HF_MISTRAL, phi3 = h->arch == HF_PHI3;
  h->gemma2 = h->arch == HF_GEMMA2;
  h->gemma = h->arch == HF_GEMMA || h->gemma2;
  h->hidden = get_int(h, c, "", "hidden_size", -1);
  h->layers = get_int(h, c, "", "num_hidden_layers", -1);
  h->heads = get_int(h, c, "", "num_attention_heads", -1);
  h->vocab = get_int(h, c, "", "vocab_size", -1);
  /* MiniMind: intermediate_size = ceil(hidden * pi / 64) * 64 when absent */
  h->ffn = get_int(h, c, "", "intermediate_size",
                   mm ? (int64_t)ceil((double)h->hidden * 3.14159265358979323846 / 64) * 64 : -1);
  h->eps = get_num(h, c, "", "rms_norm_eps", mm || mistral || h->gemma ? 1e-6 : phi3 ? 1e-5 : -1);
  h->kv_heads = get_int(h, c, "", "num_key_value_heads", h->heads);
  /* head_dim: hidden / heads when absent (Qwen3: 128) */
  if (!field(c, "head_dim", true) && h->arch != HF_QWEN3 && !h->gemma && !h->bad && h->hidden % h->heads) {
    char exp[128];
    snprintf(exp, sizeof exp, "a divisor of hidden_size (%lld), or a head_dim field", (long long)h->hidden);
    field_err(h, "num_attention_heads", exp, json_object_get(c, "num_attention_heads"));
  }
  h->head_dim = get_int(h, c, "", "head_dim", h->arch == HF_QWEN3 ? 128 : h->gemma ? 256 : h->hidden / h->heads);
  h->max_pos = get_int(h, c, "", "max_position_embeddings",
                       h->arch == HF_LLAMA ? 2048
                       : mistral           ? 4096 * 32
                       : phi3              ? 4096
                       : h->gemma          ? 8192
                                           : 32768);
  h->theta = get_num(h, c, "", "rope_theta", mm ? 1e6 : 10000);
  h->std = get_num(h, c, "", "initializer_range", 0.02);
  h->tied = get_bool(h, c, "tie_word_embeddings", mm || h->gemma);
  static const char *const silu[] = {"silu", NULL}, *const tanh_gelu[] = {"gelu_pytorch_tanh", NULL};
  if (h->gemma) /* GemmaMLP reads hidden_activation (absent or null: the tanh GELU), not hidden_act */
    want_str(h, c, "", "hidden_activation", tanh_gelu, "\"gelu_pytorch_tanh\" (the language's gelu)");
  else want_str(h, c, "", "hidden_act", silu, "\"silu\" (the SwiGLU MLP)");
  switch (h->arch) {
  case HF_LLAMA:
    h->qkv_bias = h->o_bias = get_bool(h, c, "attention_bias", false);
    h->mlp_bias = get_bool(h, c, "mlp_bias", false);
    break;
  case HF_QWEN2:
    h->qkv_bias = true;
    want_bool(h, c, "use_sliding_window", false,
              "Qwen's sliding windows of the layers past max_window_layers are not supported");
    break;
  case HF_QWEN3:
    h->qkv_bias = h->o_bias = get_bool(h, c, "attention_bias", false);
    h->qk_norm = true;
    want_bool(h, c, "use_sliding_window", false,
              "Qwen's sliding windows of the layers past max_window_layers are not supported");
    break;
  case HF_MINIMIND:
    h->qk_norm = true;
    want_bool(h, c, "use_moe", false, "mixture-of-experts MLPs are not supported");
    want_bool(h, c, "inference_rope_scaling", false, "YaRN RoPE scaling is not supported");
    break;
  case HF_MISTRAL: /* no biases; a sliding window unless sliding_window is null */
    h->window = field(c, "sliding_window", true) ? get_int(h, c, "", "sliding_window", -1) : 0;
    if (field(c, "rope_scaling", true))
      field_err(h, "rope_scaling", "null (MistralForCausalLM's RoPE is not scaled)",
                json_object_get(c, "rope_scaling"));
    break;
  case HF_GEMMA2:
  case HF_GEMMA:
    h->qkv_bias = h->o_bias = get_bool(h, c, "attention_bias", false);
    if (field(c, "rope_scaling", true))
      field_err(h, "rope_scaling", "null (Gemma's RoPE is not scaled)", json_object_get(c, "rope_scaling"));
    break;
  case HF_PHI3: { /* no biases; q, k, v in one qkv_proj, gate and up in one gate_up_proj */
    h->fused = true;
    h->window = field(c, "sliding_window", true) ? get_int(h, c, "", "sliding_window", -1) : 0;
    if (field(c, "rope_scaling", true))
      field_err(h, "rope_scaling", "null (Phi-3's LongRoPE scaling is not supported)",
                json_object_get(c, "rope_scaling"));
    json_t *prf = field(c, "partial_rotary_factor", true);
    if (prf && !(json_is_number(prf) && json_number_value(prf) == 1))
      field_err(h, "partial_rotary_factor", "1 (RoPE over part of a head is not supported)", prf);
    break;
  }
  case HF_GPT2: break;
  }
  if (h->gemma2) read_gemma2(h);
  if (!mistral && !h->gemma) read_rope_scaling(h);
  if (h->bad) return;
  char exp[128];
  if (h->heads % h->kv_heads) {
    snprintf(exp, sizeof exp, "a divisor of num_attention_heads (%lld)", (long long)h->heads);
    field_err(h, "num_key_value_heads", exp, json_object_get(c, "num_key_value_heads"));
  } else if (h->fused && h->kv_heads != h->heads) {
    snprintf(exp, sizeof exp, "num_attention_heads (%lld): grouped-query heads make unequal parts of qkv_proj",
             (long long)h->heads);
    field_err(h, "num_key_value_heads", exp, json_object_get(c, "num_key_value_heads"));
  }
  if (h->head_dim % 2)
    field_err(h, "head_dim", "an even head size (RoPE rotates pairs)", json_object_get(c, "head_dim"));
}

static void read_gpt2(Hf *h) {
  json_t *c = h->cfg;
  h->hidden = get_int(h, c, "", "n_embd", -1);
  h->layers = get_int(h, c, "", "n_layer", -1);
  h->heads = h->kv_heads = get_int(h, c, "", "n_head", -1);
  h->vocab = get_int(h, c, "", "vocab_size", -1);
  h->max_pos = get_int(h, c, "", "n_positions", -1);
  h->ffn = get_int(h, c, "", "n_inner", 4 * h->hidden);
  h->eps = get_num(h, c, "", "layer_norm_epsilon", 1e-5);
  h->std = get_num(h, c, "", "initializer_range", 0.02);
  h->tied = get_bool(h, c, "tie_word_embeddings", true);
  h->scale_attn = get_bool(h, c, "scale_attn_weights", true);
  static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  want_str(h, c, "", "activation_function", gelu,
           "\"gelu_new\" or \"gelu_pytorch_tanh\" (the tanh approximation, the language's gelu)");
  want_bool(h, c, "scale_attn_by_inverse_layer_idx", false, "a per-layer attention scale is not supported");
  want_bool(h, c, "add_cross_attention", false, "cross-attention is not supported");
  if (!h->bad && h->hidden % h->heads) {
    char exp[96];
    snprintf(exp, sizeof exp, "a divisor of n_embd (%lld)", (long long)h->hidden);
    field_err(h, "n_head", exp, json_object_get(c, "n_head"));
  }
}

/* ---- writing the .pdl ---------------------------------------------------------------------- */

/* The model's name: the config's directory (or the file's name without .json, when it is not
 * config.json), reduced to [A-Za-z0-9._-]; the model type when that leaves nothing. */
static void model_name(const Hf *h, char *buf, size_t n) {
  const char *p = h->path, *slash = strrchr(p, '/');
  const char *base = slash ? slash + 1 : p;
  size_t len;
  if (!strcmp(base, "config.json")) {
    const char *end = slash ? slash : p;
    while (end > p && end[-1] == '/') end--;
    const char *start = end;
    while (start > p && start[-1] != '/') start--;
    p = start, len = (size_t)(end - start);
  } else {
    p = base, len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".json")) len -= 5;
  }
  size_t j = 0;
  for (size_t i = 0; i < len && j + 1 < n && j < 64; i++) {
    char ch = p[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '-' || ch == '_';
    buf[j++] = ok ? ch : '_';
  }
  buf[j] = 0;
  if (!j || !strcmp(buf, ".") || !strcmp(buf, "..")) snprintf(buf, n, "%s", hf_archs[h->arch].type);
}

/* The config as read, on one line: compact, sorted keys, ASCII, each number with the fewest
 * digits (15 to 17) that read back exactly. NULL if jansson cannot write it. */
static char *config_line(const json_t *cfg) {
  return json_dumps(cfg,
                    JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(pp_json_precision(cfg)));
}

/* A number for the .pdl: the shortest that reads back, an integer written out (500000, not
 * 5e+05) and an exponent without its + and leading zeros (1e-5, not 1e-05). */
static const char *num(char *buf, double v) {
  fmt_num(buf, 32, v);
  char *e = strchr(buf, 'e');
  if (e && v == floor(v) && fabs(v) < 1e15) snprintf(buf, 32, "%.0f", v);
  else if (e) {
    char *d = e + 1, *from = e + 1;
    if (*from == '+') from++;
    else if (*from == '-') d++, from++;
    while (*from == '0' && from[1]) from++;
    memmove(d, from, strlen(from) + 1);
  }
  return buf;
}

static void write_header(FILE *f, const Hf *h, const char *what) {
  char path[600];
  size_t j = 0;
  for (const char *p = h->path; *p && j < sizeof path - 1; p++) path[j++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
  path[j] = 0;
  char *line = config_line(h->cfg);
  if (!line) diag_fatal("out of memory");
  fprintf(f, "# Generated by ppc --from-hf from %s: %s (model_type %s).\n", path, hf_archs[h->arch].arch,
          hf_archs[h->arch].type);
  fprintf(f, "# %s\n", what);
  fputs("# The model's part follows the config; the mesh and train blocks are defaults to edit (or override\n"
        "# with --tp, --pp, --dp, --micro-batch, --seq, --microbatches). Dropout is not modelled.\n",
        f);
  fprintf(f, "# hf-architecture: %s\n# hf-config: %s\n", hf_archs[h->arch].arch, line);
  free(line);
}

static void write_run(FILE *f, const Hf *h, char *name) {
  int64_t seq = h->max_pos < 1024 ? h->max_pos : 1024;
  fprintf(f, "model \"%s\"\n\n", name);
  fprintf(f, "dim vocab    = %lld\n", (long long)h->vocab);
  fprintf(f, "dim hidden   = %lld\n", (long long)h->hidden);
  fprintf(f, "dim layers   = %lld\n", (long long)h->layers);
  fprintf(f, "dim heads    = %lld\n", (long long)h->heads);
  if (h->arch != HF_GPT2) {
    fprintf(f, "dim kv_heads = %lld\n", (long long)h->kv_heads);
    fprintf(f, "dim head_dim = %lld\n", (long long)h->head_dim);
  } else fprintf(f, "dim n_pos    = %lld\n", (long long)h->max_pos);
  fprintf(f, "dim ffn      = %lld\n\n", (long long)h->ffn);
  fputs("mesh  { tp = 1, pp = 1, dp = 1 }\n", f);
  fprintf(f, "# seq = min(%s = %lld, 1024)\n", h->arch == HF_GPT2 ? "n_positions" : "max_position_embeddings",
          (long long)h->max_pos);
  fprintf(f, "train { micro_batch = 1, seq = %lld, microbatches = 1, schedule = 1f1b }\n\n", (long long)seq);
  if (h->arch == HF_GPT2) /* the hub's GPT-2 files (GPT2Model's state dict) name wte.weight, h.0.* */
    fputs("# the hub's GPT2Model checkpoints name the tensors without \"transformer.\": ppr --init takes either\n"
          "checkpoint { optional_prefix = \"transformer.\" }\n\n",
          f);
  fputs("input tokens: i32[B, S]\ninput labels: i32[B, S]\n\n", f);
}

/* A parameter line: name, shape, checkpoint name (with {l} inside the layer), initializer, role. */
static void param(FILE *f, bool layer, const char *var, const char *shape, const char *ckpt, const char *init,
                  const char *role) {
  char decl[32];
  snprintf(decl, sizeof decl, "%s:", var);
  fprintf(f, "%sparam %-7s %-29s as \"%s\" init %s%s%s\n", layer ? "  " : "", decl, shape, ckpt, init,
          *role ? " tp " : "", role);
}

/* Gemma 2's attention: the scale from query_pre_attn_scalar, the scores' soft cap, a window on the
 * even layers; its output normed before the residual add, and the MLP's input by its own norm */
static void write_gemma2_attention(FILE *f, const Hf *h, const char *eps) {
  char sc[32], cap[64] = "", window[96] = "", nc[32];
  num(sc, 1 / sqrt(h->qpas));
  if (h->attn_cap) snprintf(cap, sizeof cap, ", softcap = %s", num(nc, h->attn_cap));
  if (h->window) snprintf(window, sizeof window, ", window = %lld * (1 - l %% 2)", (long long)h->window);
  fprintf(f, "  a = attention(q, k, v, causal, scale = %s%s%s)   # local (windowed) on even layers\n", sc, cap, window);
  fprintf(f, "  x = x + rmsnorm(linear(merge_heads(a), wo%s), lnpa, eps = %s)\n", h->o_bias ? ", bo" : "", eps);
  fprintf(f, "  h = rmsnorm(x, lnpf, eps = %s)\n", eps);
}

/* Gemma 2's norms besides input_layernorm: of the attention's output, before and after the MLP */
static void write_gemma2_norms(FILE *f) {
  param(f, true, "lnpa", "[hidden]", "model.layers.{l}.post_attention_layernorm.weight", "zeros", "");
  param(f, true, "lnpf", "[hidden]", "model.layers.{l}.pre_feedforward_layernorm.weight", "zeros", "");
  param(f, true, "lnff", "[hidden]", "model.layers.{l}.post_feedforward_layernorm.weight", "zeros", "");
}

/* The parameters of a layer of separate q, k, v, o, gate, up and down projections */
static void write_layer_params(FILE *f, const Hf *h, const char *std) {
  char ck[160];
#define CK(suffix) (snprintf(ck, sizeof ck, "model.layers.{l}.%s", suffix), ck)
  param(f, true, "wq", "[heads * head_dim, hidden]", CK("self_attn.q_proj.weight"), std, "column");
  if (h->qkv_bias) param(f, true, "bq", "[heads * head_dim]", CK("self_attn.q_proj.bias"), "zeros", "column");
  param(f, true, "wk", "[kv_heads * head_dim, hidden]", CK("self_attn.k_proj.weight"), std, "column");
  if (h->qkv_bias) param(f, true, "bk", "[kv_heads * head_dim]", CK("self_attn.k_proj.bias"), "zeros", "column");
  param(f, true, "wv", "[kv_heads * head_dim, hidden]", CK("self_attn.v_proj.weight"), std, "column");
  if (h->qkv_bias) param(f, true, "bv", "[kv_heads * head_dim]", CK("self_attn.v_proj.bias"), "zeros", "column");
  param(f, true, "wo", "[hidden, heads * head_dim]", CK("self_attn.o_proj.weight"), std, "row");
  if (h->o_bias) param(f, true, "bo", "[hidden]", CK("self_attn.o_proj.bias"), "zeros", "");
  if (h->qk_norm) {
    param(f, true, "qn", "[head_dim]", CK("self_attn.q_norm.weight"), "ones", "");
    param(f, true, "kn", "[head_dim]", CK("self_attn.k_norm.weight"), "ones", "");
  }
  if (h->gemma2) write_gemma2_norms(f);
  else param(f, true, "ln2", "[hidden]", CK("post_attention_layernorm.weight"), h->gemma ? "zeros" : "ones", "");
  param(f, true, "wg", "[ffn, hidden]", CK("mlp.gate_proj.weight"), std, "column");
  if (h->mlp_bias) param(f, true, "bg", "[ffn]", CK("mlp.gate_proj.bias"), "zeros", "column");
  param(f, true, "wu", "[ffn, hidden]", CK("mlp.up_proj.weight"), std, "column");
  if (h->mlp_bias) param(f, true, "bu", "[ffn]", CK("mlp.up_proj.bias"), "zeros", "column");
  param(f, true, "wd", "[hidden, ffn]", CK("mlp.down_proj.weight"), std, "row");
  if (h->mlp_bias) param(f, true, "bd", "[hidden]", CK("mlp.down_proj.bias"), "zeros", "");
#undef CK
}

/* Phi-3's: q, k, v in one qkv_proj and gate and up in one gate_up_proj, each a column-parallel
 * weight cut in equal parts by chunk (each part split over tensor parallelism) */
static void write_phi3_params(FILE *f, const char *std) {
  param(f, true, "wqkv", "[3 * heads * head_dim, hidden]", "model.layers.{l}.self_attn.qkv_proj.weight", std, "column");
  param(f, true, "wo", "[hidden, heads * head_dim]", "model.layers.{l}.self_attn.o_proj.weight", std, "row");
  param(f, true, "ln2", "[hidden]", "model.layers.{l}.post_attention_layernorm.weight", "ones", "");
  param(f, true, "wgu", "[2 * ffn, hidden]", "model.layers.{l}.mlp.gate_up_proj.weight", std, "column");
  param(f, true, "wd", "[hidden, ffn]", "model.layers.{l}.mlp.down_proj.weight", std, "row");
}

static void write_llama_like(FILE *f, const Hf *h, char *name) {
  char nb[32], std[64], eps[64], rope[320];
  snprintf(std, sizeof std, "normal(std = %s)", num(nb, h->std));
  num(eps, h->eps);
  if (h->gemma) strcat(eps, ", offset = 1"); /* Gemma's norms scale by (1 + w) */
  char what[400];
  char window[48] = "";
  if (h->window)
    snprintf(window, sizeof window, " in a sliding window of %lld%s", (long long)h->window,
             h->gemma2 ? " on even layers" : "");
  snprintf(what, sizeof what,
           "RMSNorm%s, %s attention%s%s%s, RoPE%s, %s%s, %s head;\n"
           "# parameter names as transformers' state_dict.",
           h->gemma ? " by (1 + w), embeddings times sqrt(hidden)" : "",
           h->kv_heads == h->heads ? "multi-head" : "grouped-query", window,
           h->qkv_bias ? (h->o_bias ? " with q/k/v/o biases" : " with q/k/v biases") : "",
           h->qk_norm ? ", QK-norm" : "", h->llama3 ? " with Llama-3 frequency scaling" : "",
           h->gemma ? "GeGLU" : "SwiGLU", h->mlp_bias ? " with biases" : "", h->tied ? "tied" : "untied");
  write_header(f, h, what);
  write_run(f, h, name);
  param(f, false, "embed", "[vocab, hidden]", "model.embed_tokens.weight", std, "vocab");
  if (h->gemma) {
    char sq[32];
    fprintf(f, "x = scale(embedding(tokens, embed), by = %s)   # [S, B, hidden], times sqrt(hidden)\n\n",
            num(sq, sqrt((double)h->hidden)));
  } else fputs("x = embedding(tokens, embed)                        # [S, B, hidden]\n\n", f);
  fputs("for l in 0..layers {\n", f);
  param(f, true, "ln1", "[hidden]", "model.layers.{l}.input_layernorm.weight", h->gemma ? "zeros" : "ones", "");
  if (h->fused) write_phi3_params(f, std);
  else write_layer_params(f, h, std);
  char n1[32], n2[32], n3[32];
  int r = snprintf(rope, sizeof rope, "theta = %s", num(nb, h->theta));
  if (h->llama3)
    snprintf(rope + r, sizeof rope - (size_t)r,
             ", llama3, factor = %s, low_freq_factor = %s, high_freq_factor = %s, original_max_pos = %lld",
             num(n1, h->factor), num(n2, h->low_freq), num(n3, h->high_freq), (long long)h->orig_max_pos);
  fprintf(f, "\n  h = rmsnorm(x, ln1, eps = %s)\n", eps);
  const char *qkv[3][4] = {{"q", "wq", "bq", "heads"}, {"k", "wk", "bk", "kv_heads"}, {"v", "wv", "bv", "kv_heads"}};
  if (h->fused) fputs("  qkv = linear(h, wqkv)                               # q, k, v side by side\n", f);
  for (int i = 0; i < 3 && h->fused; i++)
    fprintf(f, "  %s = split_heads(chunk(qkv, index = %d, parts = 3), heads = %s)\n", qkv[i][0], i, qkv[i][3]);
  for (int i = 0; i < 3 && !h->fused; i++) {
    char lin[64];
    snprintf(lin, sizeof lin, "linear(h, %s%s%s)", qkv[i][1], h->qkv_bias ? ", " : "", h->qkv_bias ? qkv[i][2] : "");
    if (h->qk_norm && i < 2)
      fprintf(f, "  %s = rmsnorm(split_heads(%s, heads = %s), %sn, eps = %s)%s\n", qkv[i][0], lin, qkv[i][3], qkv[i][0],
              eps, i ? "" : "   # QK-norm per head");
    else fprintf(f, "  %s = split_heads(%s, heads = %s)\n", qkv[i][0], lin, qkv[i][3]);
  }
  fprintf(f, "  q = rope(q, %s)\n  k = rope(k, %s)\n", rope, rope);
  if (h->gemma2) write_gemma2_attention(f, h, eps);
  else {
    if (h->window)
      fprintf(f, "  a = attention(q, k, v, causal, window = %lld)   # sliding_window\n", (long long)h->window);
    else fputs("  a = attention(q, k, v, causal)\n", f);
    fprintf(f, "  x = x + linear(merge_heads(a), wo%s)\n", h->o_bias ? ", bo" : "");
    fprintf(f, "  h = rmsnorm(x, ln2, eps = %s)\n", eps);
  }
  if (h->fused)
    fputs("  gu = linear(h, wgu)                                 # gate and up side by side\n"
          "  x = x + linear(silu(chunk(gu, index = 0, parts = 2)) * chunk(gu, index = 1, parts = 2), wd)   # SwiGLU\n",
          f);
  else if (h->gemma2)
    fprintf(f, "  x = x + rmsnorm(linear(gelu(linear(h, wg)) * linear(h, wu), wd), lnff, eps = %s)   # GeGLU, normed\n",
            eps);
  else if (h->gemma) fputs("  x = x + linear(gelu(linear(h, wg)) * linear(h, wu), wd)   # GeGLU (tanh GELU)\n", f);
  else if (h->mlp_bias) fputs("  x = x + linear(silu(linear(h, wg, bg)) * linear(h, wu, bu), wd, bd)   # SwiGLU\n", f);
  else fputs("  x = x + linear(silu(linear(h, wg)) * linear(h, wu), wd)   # SwiGLU\n", f);
  fputs("}\n\n", f);
  param(f, false, "norm", "[hidden]", "model.norm.weight", h->gemma ? "zeros" : "ones", "");
  if (!h->tied) param(f, false, "head", "[vocab, hidden]", "lm_head.weight", std, "vocab");
  char cap[64] = "", nc[32];
  if (h->logit_cap) snprintf(cap, sizeof cap, ", cap = %s)", num(nc, h->logit_cap));
  fprintf(f, "logits = %stranspose_sb(linear(rmsnorm(x, norm, eps = %s), %s))%s   # %s head%s, [B, S, vocab]\n",
          *cap ? "softcap(" : "", eps, h->tied ? "embed" : "head", cap, h->tied ? "tied" : "untied",
          *cap ? ", soft-capped" : "");
  fputs("loss = cross_entropy(logits, labels)\n", f);
}

static void write_gpt2(FILE *f, const Hf *h, char *name) {
  char nb[32], std[64], eps[32];
  snprintf(std, sizeof std, "normal(std = %s)", num(nb, h->std));
  num(eps, h->eps);
  char what[300];
  snprintf(what, sizeof what,
           "Learned positions, LayerNorm, GELU (tanh), biased Conv1D linears ([in, out]: matmul), %s head;\n"
           "# parameter names as transformers' state_dict.",
           h->tied ? "tied" : "untied");
  write_header(f, h, what);
  write_run(f, h, name);
  param(f, false, "wte", "[vocab, hidden]", "transformer.wte.weight", std, "vocab");
  param(f, false, "wpe", "[n_pos, hidden]", "transformer.wpe.weight", std, "");
  fputs("x = embedding(tokens, wte) + pos_embedding(wpe)     # [S, B, hidden]\n\n", f);
  fputs("for l in 0..layers {\n", f);
  char ck[160];
#define CK(suffix) (snprintf(ck, sizeof ck, "transformer.h.{l}.%s", suffix), ck)
  param(f, true, "ln1_w", "[hidden]", CK("ln_1.weight"), "ones", "");
  param(f, true, "ln1_b", "[hidden]", CK("ln_1.bias"), "zeros", "");
  param(f, true, "attn_w", "[hidden, 3 * hidden]", CK("attn.c_attn.weight"), std, "column");
  param(f, true, "attn_b", "[3 * hidden]", CK("attn.c_attn.bias"), "zeros", "column");
  param(f, true, "proj_w", "[hidden, hidden]", CK("attn.c_proj.weight"), std, "row");
  param(f, true, "proj_b", "[hidden]", CK("attn.c_proj.bias"), "zeros", "");
  param(f, true, "ln2_w", "[hidden]", CK("ln_2.weight"), "ones", "");
  param(f, true, "ln2_b", "[hidden]", CK("ln_2.bias"), "zeros", "");
  param(f, true, "fc_w", "[hidden, ffn]", CK("mlp.c_fc.weight"), std, "column");
  param(f, true, "fc_b", "[ffn]", CK("mlp.c_fc.bias"), "zeros", "column");
  param(f, true, "fc2_w", "[ffn, hidden]", CK("mlp.c_proj.weight"), std, "row");
  param(f, true, "fc2_b", "[hidden]", CK("mlp.c_proj.bias"), "zeros", "");
#undef CK
  fprintf(f, "\n  h = layernorm(x, ln1_w, ln1_b, eps = %s)\n", eps);
  fputs("  qkv = matmul(h, attn_w, attn_b)                     # [S, B, 3*hidden]: q, k, v side by side\n", f);
  fputs("  q = split_heads(chunk(qkv, index = 0, parts = 3), heads = heads)\n", f);
  fputs("  k = split_heads(chunk(qkv, index = 1, parts = 3), heads = heads)\n", f);
  fputs("  v = split_heads(chunk(qkv, index = 2, parts = 3), heads = heads)\n", f);
  fprintf(f, "  x = x + matmul(merge_heads(attention(q, k, v, causal%s)), proj_w, proj_b)\n",
          h->scale_attn ? "" : ", scale = 1");
  fprintf(f, "  h = layernorm(x, ln2_w, ln2_b, eps = %s)\n", eps);
  fputs("  x = x + matmul(gelu(matmul(h, fc_w, fc_b)), fc2_w, fc2_b)\n", f);
  fputs("}\n\n", f);
  param(f, false, "lnf_w", "[hidden]", "transformer.ln_f.weight", "ones", "");
  param(f, false, "lnf_b", "[hidden]", "transformer.ln_f.bias", "zeros", "");
  if (!h->tied) param(f, false, "head", "[vocab, hidden]", "lm_head.weight", std, "vocab");
  fprintf(f, "logits = transpose_sb(linear(layernorm(x, lnf_w, lnf_b, eps = %s), %s))   # %s head, [B, S, vocab]\n",
          eps, h->tied ? "wte" : "head", h->tied ? "tied" : "untied");
  fputs("loss = cross_entropy(logits, labels)\n", f);
}

/* ---- the file ------------------------------------------------------------------------------ */

/* text to out through a temporary file beside it, renamed over it at the end. */
static int write_file(const char *out, const char *text, size_t len) {
  struct stat sb;
  if (!stat(out, &sb) && S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "ppc: error: -o '%s' is a directory: with --from-hf, -o names the .pdl file to write\n", out);
    return 1;
  }
  const char *slash = strrchr(out, '/');
  int base = slash ? (int)(slash - out + 1) : 0;
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%.*s.%s.ppc-XXXXXX", base, out, out + base) >= (int)sizeof tmp) {
    fprintf(stderr, "ppc: error: -o '%s': the path is too long\n", out);
    return 1;
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "ppc: error: -o '%s': cannot make a file beside it: %s\n", out, strerror(errno));
    return 1;
  }
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  FILE *f = fdopen(fd, "w");
  bool ok = f && fwrite(text, 1, len, f) == len;
  ok = f && !fclose(f) && ok;
  if (!f) close(fd);
  if (!ok || rename(tmp, out)) {
    fprintf(stderr, "ppc: error: -o '%s': cannot write it: %s\n", out, strerror(errno));
    unlink(tmp);
    return 1;
  }
  return 0;
}

int hf_import(const char *arg, const char *out) {
  char path[4096];
  struct stat sb;
  bool dir = !stat(arg, &sb) && S_ISDIR(sb.st_mode);
  if (snprintf(path, sizeof path, dir ? "%s/config.json" : "%s", arg) >= (int)sizeof path) {
    fprintf(stderr, "ppc: error: %s: the path is too long\n", arg);
    return 1;
  }
  int missing = stat(path, &sb);
  if (missing || !S_ISREG(sb.st_mode)) {
    fprintf(stderr, "ppc: error: %s: %s\n", path,
            dir       ? "the directory has no config.json"
            : missing ? strerror(errno)
                      : "not a regular file (expected a config.json or a directory holding one)");
    return 1;
  }
  json_error_t jerr;
  Hf h = {.path = path};
  h.cfg = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!h.cfg) {
    fprintf(stderr, "ppc: error: %s:%d:%d: not a valid JSON config: %s\n", path, jerr.line, jerr.column, jerr.text);
    return 1;
  }
  int rc = 1;
  char *text = NULL;
  size_t len = 0;
  if (!json_is_object(h.cfg)) {
    fprintf(stderr, "ppc: error: %s: expected a JSON object (a Hugging Face config), got %s\n", path,
            json_is_array(h.cfg) ? "an array" : "a single value");
    goto out;
  }
  if (read_arch(&h)) goto out;
  if (h.arch == HF_GPT2) read_gpt2(&h);
  else read_llama_like(&h);
  if (h.bad) goto out;
  char name[80];
  model_name(&h, name, sizeof name);
  FILE *f = open_memstream(&text, &len);
  if (!f) diag_fatal("out of memory");
  if (h.arch == HF_GPT2) write_gpt2(f, &h, name);
  else write_llama_like(f, &h, name);
  if (fclose(f)) diag_fatal("out of memory");
  if (out) rc = write_file(out, text, len);
  else rc = fwrite(text, 1, len, stdout) != len || fflush(stdout);
out:
  free(text);
  json_decref(h.cfg);
  return rc;
}
