/* test_kir.c — the kernel IR's builder (kir.c) as the C renderer prints it: a temporary built
 * again with the same value is the earlier one where nothing between could have changed that
 * value, and a new one where something could (a store to a buffer it loads, a set of a temporary
 * it reads) or where the earlier one is out of reach (another loop's body); and a flat kernel's rows
 * a thread (kir_flat_rows) in its geometry and its CUDA and C sources. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ppc.h"
#include "test_util.h"

/* The kernel's C source (the caller frees it). */
static char *render(const Kernel *k) {
  char *out = NULL;
  size_t len = 0, cap = 0;
  cg_render_kernel(k, LANG_C, &out, &len, &cap);
  return out;
}

static int sigmoid(Kernel *k, int x) {
  return kir_e(k, K_DIV, kir_f(k, 1), kir_e(k, K_ADD, kir_f(k, 1), kir_e(k, K_EXP, kir_e(k, K_NEG, x, 0, 0), 0, 0), 0),
               0);
}

/* SwiGLU's backward as its two fused ops build it: each loads the gate and takes its sigmoid. */
static void test_shared_load(void) {
  Kernel *k = kir_new("swiglu_dx", KM_FLAT, 100, 256);
  int du = kir_buf(k, "p0", PP_F32, true), dy = kir_buf(k, "p1", PP_F32, false);
  int gate = kir_buf(k, "p2", PP_F32, false), dg = kir_buf(k, "p3", PP_F32, true);
  int r = kir_row(k);
  int x0 = kir_let(k, kir_ld(k, gate, r));
  kir_store(k, du, r, '=', kir_e(k, K_MUL, kir_ld(k, dy, r), kir_e(k, K_MUL, x0, sigmoid(k, x0), 0), 0));
  int x1 = kir_let(k, kir_ld(k, gate, kir_row(k)));
  int s = kir_let(k, sigmoid(k, x1));
  kir_store(k, dg, r, '=', kir_e(k, K_MUL, s, x1, 0));
  check(k->e[x0].a == k->e[x1].a, "the gate loaded twice is one temporary (v%d, v%d)", k->e[x0].a, k->e[x1].a);
  char *c = render(k);
  check(count(c, "= p2[r];") == 1, "one load of the gate in:\n%s", c);
  check(count(c, "ppk_exp((-v0))") == 2 && !strstr(c, "v2 = p2"), "both sigmoids of v0 in:\n%s", c);
  free(c);
  (void)s;
  kir_free(k);
}

/* A store to the buffer a temporary loads, between the two: the second is a new load. */
static void test_store_between(void) {
  Kernel *k = kir_new("rmw", KM_FLAT, 100, 256);
  int b = kir_buf(k, "p0", PP_F32, true);
  int r = kir_row(k);
  int x0 = kir_let(k, kir_ld(k, b, r));
  kir_store(k, b, r, '=', kir_e(k, K_MUL, x0, kir_f(k, 2), 0));
  int x1 = kir_let(k, kir_ld(k, b, r));
  kir_store(k, b, r, '=', kir_e(k, K_ADD, x1, kir_f(k, 1), 0));
  check(k->e[x0].a != k->e[x1].a, "a load after a store to its buffer is a new temporary");
  char *c = render(k);
  check(count(c, "= p0[r];") == 2, "two loads of p0 in:\n%s", c);
  free(c);
  kir_free(k);
}

/* A temporary that reads an accumulator set in between, and one in another loop's body. */
static void test_set_and_scope(void) {
  Kernel *k = kir_new("acc", KM_FLAT, 100, 256);
  int in = kir_buf(k, "p0", PP_F32, false), out = kir_buf(k, "p1", PP_F32, true);
  int r = kir_row(k);
  int acc = kir_let(k, kir_f(k, 0));
  int t0 = kir_let(k, kir_e(k, K_MUL, acc, kir_f(k, 3), 0));
  kir_set(k, acc, '+', kir_ld(k, in, r));
  int t1 = kir_let(k, kir_e(k, K_MUL, acc, kir_f(k, 3), 0));
  check(k->e[t0].a != k->e[t1].a, "a temporary reading an accumulator set since is a new one");
  int t2 = kir_let(k, kir_e(k, K_MUL, acc, kir_f(k, 3), 0));
  check(k->e[t1].a == k->e[t2].a, "with no set between, the same temporary");
  int j = kir_for(k, kir_i(k, 4));
  int l0 = kir_let(k, kir_ld(k, in, r));
  kir_store(k, out, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 4), 0), j, 0), '=', l0);
  kir_end(k);
  int l1 = kir_let(k, kir_ld(k, in, r)); /* the same tree, but the loop's body is closed */
  check(k->e[l0].a != k->e[l1].a, "a temporary of a closed loop's body is not reused");
  char *c = render(k);
  check(count(c, "= p0[r];") == 2, "the loop's load and the one after it in:\n%s", c);
  free(c);
  kir_store(k, out, r, '=', kir_e(k, K_ADD, t2, l1, 0));
  kir_free(k);
}

/* The kernel's source in lang (the caller frees it). */
static char *render_in(const Kernel *k, Lang lang) {
  char *out = NULL;
  size_t len = 0, cap = 0;
  cg_render_kernel(k, lang, &out, &len, &cap);
  return out;
}

/* A flat kernel's rows a thread (kir_flat_rows): KIR_FLAT_ROWS without a loop, with the grid that
 * covers them and a GPU loop of whole unrolled passes and a checked last one; 1 with a loop. */
static void test_flat_rows(void) {
  Kernel *k = kir_new("axpy", KM_FLAT, 5000, 256);
  int y = kir_buf(k, "p0", PP_F32, true), x = kir_buf(k, "p1", PP_F32, false);
  int r = kir_row(k);
  kir_store(k, y, r, '+', kir_e(k, K_MUL, kir_ld(k, x, r), kir_f(k, 2), 0));
  KGeom g = kir_geom(k);
  check(kir_flat_rows(k) == KIR_FLAT_ROWS && g.grid == (5000 + 256 * KIR_FLAT_ROWS - 1) / (256 * KIR_FLAT_ROWS),
        "a loop-free flat kernel: %d rows a thread, grid %lld", kir_flat_rows(k), (long long)g.grid);
  char *cu = render_in(k, LANG_CUDA), *c = render(k);
  check(strstr(cu, "#pragma unroll") && strstr(cu, "if (ppk_b + 1024 <= 5000LL)") &&
            strstr(cu, "if (r >= 5000LL) break;") && count(cu, "p0[r] += ") == 2,
        "CUDA: whole passes unrolled, the last one checked, in:\n%s", cu);
  check(strstr(c, "for (int64_t r = 0; r < 5000LL; r++)") && count(c, "p0[r] += ") == 1,
        "C: one loop over the rows, in:\n%s", c);
  free(cu);
  free(c);
  kir_free(k);

  k = kir_new("rowsum", KM_FLAT, 5000, 256);
  y = kir_buf(k, "p0", PP_F32, true), x = kir_buf(k, "p1", PP_F32, false);
  r = kir_row(k);
  int j = kir_for(k, kir_i(k, 8));
  kir_store(k, y, r, '+', kir_ld(k, x, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 8), 0), j, 0)));
  kir_end(k);
  g = kir_geom(k);
  check(kir_flat_rows(k) == 1 && g.grid == (5000 + 255) / 256, "a flat kernel with a loop: %d row a thread, grid %lld",
        kir_flat_rows(k), (long long)g.grid);
  cu = render_in(k, LANG_CUDA);
  check(!strstr(cu, "ppk_b") && strstr(cu, "r += (int64_t)gridDim.x * 256"), "CUDA: a grid-stride loop, in:\n%s", cu);
  free(cu);
  kir_free(k);
}

/* A reduction that fetches the next row (kir_reduce_fetch): the C source fetches a line of that row
 * per 64 bytes of each part of the row the reduction reads (16 floats, 32 bf16), never past the
 * last row; the GPU languages have no fetch. */
static void test_reduce_fetch(void) {
  for (int bf = 0; bf < 2; bf++) {
    Kernel *k = kir_new("rowexp", KM_BLOCK, 100, 32);
    int x = kir_buf(k, "p0", bf ? PP_BF16 : PP_F32, false), y = kir_buf(k, "p1", PP_F32, true);
    int r = kir_row(k);
    int j = kir_reduce(k, kir_i(k, 70));
    kir_reduce_fetch(k, x, 70);
    int s = kir_reduce_end(
        k, '+', kir_e(k, K_EXP, kir_ld(k, x, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 70), 0), j, 0)), 0, 0));
    kir_store(k, y, r, '=', s);
    char *c = render(k), *cl = render_in(k, LANG_OPENCL), *cu = render_in(k, LANG_CUDA);
    char want[160];
    snprintf(want, sizeof want,
             "for (int ppk_q = 0; ppk_q < ppk_m; ppk_q += %d) __builtin_prefetch(&p0[(r + 1) * 70LL + ppk_j + ppk_q]);",
             bf ? 32 : 16);
    check(strstr(c, "if (r + 1 < 100LL)") && count(c, want) == 1, "C (%s): the next row fetched, in:\n%s",
          bf ? "bf16" : "f32", c);
    check(!strstr(cl, "prefetch") && !strstr(cu, "prefetch"), "no fetch in OpenCL or CUDA:\n%s\n%s", cl, cu);
    free(c);
    free(cl);
    free(cu);
    kir_free(k);
  }
}

/* Row r + n of a flat kernel. */
static int row_at(Kernel *k, int r, int n) { return n ? kir_e(k, K_IADD, r, kir_i(k, n), 0) : r; }

/* The rendered C kernel compiled with ppc's flags (PPC_KERNEL_CFLAGS) and the prelude, and run with
 * main_body as its main: what it prints, into out ("" if it did not build or run). */
static void compile_and_run(const char *src, const char *main_body, char *out, size_t outlen) {
  char dir[] = "/tmp/test_kir.XXXXXX", path[64], cmd[512];
  out[0] = 0;
  if (!mkdtemp(dir)) return;
  char *pre = NULL;
  size_t len = 0, cap = 0;
  cg_render_prelude(LANG_C, &pre, &len, &cap);
  snprintf(path, sizeof path, "%s/k.c", dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%s\n%s\n#include <stdio.h>\nint main(void) {\n%s\n  return 0;\n}\n", pre, src, main_body);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc %s -o %s/k %s/k.c -lm && %s/k > %s/out.txt", PPC_KERNEL_CFLAGS, dir, dir, dir, dir);
    if (system(cmd) == 0) {
      snprintf(path, sizeof path, "%s/out.txt", dir);
      if ((f = fopen(path, "r"))) {
        if (!fgets(out, (int)outlen, f)) out[0] = 0;
        fclose(f);
      }
    }
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) check(0, "%s", cmd);
  free(pre);
}

/* Fused multiply-adds are the renderer's (the table's fma), and the C kernels are compiled without
 * contraction (PPC_KERNEL_CFLAGS): a product added in one expression is written as fmaf, the left
 * term's when both are products, a sum of products reduced into its partials too; a product kept in
 * a temporary and added later rounds first; OpenCL C and CUDA C write the same ones (fma, fmaf), their
 * compilers' contraction off (the OpenCL prelude's FP_CONTRACT OFF, NVRTC's --fmad=false).
 * Checked on values where the two differ: a = 1 + 2^-12, a·a = 1 + 2^-11 + 2^-24 rounds to
 * 1 + 2^-11 (a tie, to even), so a·a - (1 + 2^-11) is 2^-24 fused and 0 otherwise. */
static void test_fused_multiply_add(void) {
  Kernel *k = kir_new("madd", KM_FLAT, 1, 32);
  int y = kir_buf(k, "p0", PP_F32, true), x = kir_buf(k, "p1", PP_F32, false);
  int r = kir_row(k);
  int a = kir_ld(k, x, r), b = kir_ld(k, x, row_at(k, r, 1)), c = kir_ld(k, x, row_at(k, r, 2)),
      aa = kir_e(k, K_MUL, a, a, 0);
  kir_store(k, y, r, '=', kir_e(k, K_ADD, aa, b, 0));                                      /* a*a + b */
  kir_store(k, y, row_at(k, r, 1), '=', kir_e(k, K_SUB, aa, c, 0));                        /* a*a - c */
  kir_store(k, y, row_at(k, r, 2), '=', kir_e(k, K_SUB, c, aa, 0));                        /* c - a*a */
  kir_store(k, y, row_at(k, r, 4), '=', kir_e(k, K_ADD, aa, kir_e(k, K_MUL, c, c, 0), 0)); /* a*a + c*c */
  int v = kir_let(k, aa);
  kir_store(k, y, row_at(k, r, 3), '=', kir_e(k, K_ADD, v, b, 0)); /* t = a*a; t + b */
  char *src = render(k), *cl = render_in(k, LANG_OPENCL), *cu = render_in(k, LANG_CUDA), *pre_cl = NULL;
  size_t pre_len = 0, pre_cap = 0;
  cg_render_prelude(LANG_OPENCL, &pre_cl, &pre_len, &pre_cap);
  check(strstr(src, "p0[r] = fmaf(p1[r], p1[r], p1[(r + 1LL)]);") &&
            strstr(src, "= fmaf(p1[r], p1[r], -(p1[(r + 2LL)]));") &&
            strstr(src, "= fmaf(-(p1[r]), p1[r], p1[(r + 2LL)]);") &&
            strstr(src, "= fmaf(p1[r], p1[r], (p1[(r + 2LL)] * p1[(r + 2LL)]));") && count(src, "fmaf") == 4,
        "C: four fmaf (the left product when both terms are), none for the temporary, in:\n%s", src);
  check(strstr(cl, "p0[r] = fma(p1[r], p1[r], p1[(r + 1L)]);") &&
            strstr(cl, "= fma(p1[r], p1[r], (p1[(r + 2L)] * p1[(r + 2L)]));") && count(cl, "fma(") == 8 &&
            strstr(cu, "p0[r] = fmaf(p1[r], p1[r], p1[(r + 1LL)]);") && count(cu, "fmaf(") == 8 && pre_cl &&
            strstr(pre_cl, "#pragma OPENCL FP_CONTRACT OFF"),
        "OpenCL and CUDA: the same four fused multiply-adds in each of their two loops, none for the temporary, "
        "OpenCL's contraction off, "
        "in:\n%s\n%s",
        cl, cu);
  char out[128];
  compile_and_run(src,
                  "  float x[3] = {1.0f + 0x1p-12f, -(1.0f + 0x1p-11f), 1.0f + 0x1p-11f}, y[5];\n"
                  "  madd(y, x);\n  printf(\"%a %a %a %a\\n\", y[0], y[1], y[2], y[3]);",
                  out, sizeof out);
  check(!strcmp(out, "0x1p-24 0x1p-24 -0x1p-24 0x0p+0\n"),
        "fused: a*a + b, a*a - c = 2^-24, c - a*a = -2^-24; the temporary's sum 0 (no contraction): got %s", out);
  free(src);
  free(cl);
  free(cu);
  free(pre_cl);
  kir_free(k);

  /* a reduction's sum of products: each product fused into its partial, in C and OpenCL alike */
  k = kir_new("dot", KM_BLOCK, 4, 32);
  x = kir_buf(k, "p0", PP_F32, false), y = kir_buf(k, "p1", PP_F32, true);
  r = kir_row(k);
  int j = kir_reduce(k, kir_i(k, 70));
  int e = kir_ld(k, x, kir_e(k, K_IADD, kir_e(k, K_IMUL, r, kir_i(k, 70), 0), j, 0));
  kir_store(k, y, r, '=', kir_reduce_end(k, '+', kir_e(k, K_MUL, e, e, 0)));
  src = render(k), cl = render_in(k, LANG_OPENCL);
  check(count(src, "ppk_part[ppk_t] = fmaf(") == 1 && !strstr(src, "ppk_x"),
        "C: the product fused into its partial:\n%s", src);
  check(strstr(cl, "ppk_acc = fma(p0[((r * 70L) + v0)], p0[((r * 70L) + v0)], ppk_acc);") && !strstr(cl, "ppk_x"),
        "OpenCL: the product fused into its partial:\n%s", cl);
  free(src);
  free(cl);
  kir_free(k);
}

int main(void) {
  test_shared_load();
  test_store_between();
  test_set_and_scope();
  test_flat_rows();
  test_reduce_fetch();
  test_fused_multiply_add();
  return check_done();
}
