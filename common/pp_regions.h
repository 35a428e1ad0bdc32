/* pp_regions.h — the regions of a rank's arena, in the order they lie in it, and their names in a
 * listing's `region` lines: one table for ppc (compiler/ppc.h BufClass, cg_program.c) and ppr
 * (rt_prog.h RT_REG_*, rt_prog.c), whose enums follow this order. */
#ifndef PP_REGIONS_H
#define PP_REGIONS_H

#define PP_NREGIONS 8
static inline const char *pp_region_name(int r) {
  static const char *const names[PP_NREGIONS] = {"params", "grads", "adam_m",  "adam_v",
                                                 "copies", "slots", "scratch", "workspace"};
  return r >= 0 && r < PP_NREGIONS ? names[r] : "?";
}

/* The word after `block optimizer` in a listing that says the block leaves the whole grads region
 * zero (AdamW stores 0 over the gradients it has read, the padding between them included):
 * ppr then skips the next step's zero_grads. */
#define PP_OPT_CLEARS_GRADS "clears_grads"

#endif
