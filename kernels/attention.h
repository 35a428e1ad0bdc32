/* attention.h - per-row scaled dot-product attention kernels (forward, dq, dk, dv) with grouped-query heads and an optional causal mask. */

/*
 * Pasted verbatim into both the generated C and the generated CUDA C, after a
 * prelude defining PPK_FN, PPK_RESTRICT, PPK_NEG_INF, PPK_MAX_HEAD_DIM and the
 * int64_t/int32_t types. Only plain C99 arithmetic and expf/logf/sqrtf/fmaxf/
 * fminf are used here.
 *
 * Each function computes one independent row; the caller runs
 * `for row in [0, rows)` in parallel (OpenMP in C, one CUDA thread per row).
 *
 * Layouts (contiguous float32, sequence-first):
 *   q, o, dout, dq : [S, B, HQ, D]    element (i,b,h,d) at ((i*B + b)*HQ + h)*D + d
 *   k, v, dk, dv   : [S, B, HK, D]    element (j,b,g,d) at ((j*B + b)*HK + g)*D + d
 *   lse, delta     : [B, HQ, S]       element (b,h,i)   at (b*HQ + h)*S + i
 * HQ % HK == 0; query head h reads kv head g = h / (HQ/HK), so kv head g
 * serves query heads [g*(HQ/HK), (g+1)*(HQ/HK)).
 *
 * Notation: s_ij = scale * q_i.k_j, the score of query i against key j; with
 * causal != 0 only keys j <= i take part (the others have P_ij = 0).
 *   P_ij    = exp(s_ij - lse_i)            (the softmax over j)
 *   dP_ij   = dout_i . v_j
 *   delta_i = dout_i . o_i  (= sum_j P_ij dP_ij)
 *   dS_ij   = P_ij (dP_ij - delta_i)       (gradient w.r.t. s_ij)
 *
 * Precondition: D <= PPK_MAX_HEAD_DIM (the bound of the local accumulators).
 * The compiler must reject larger head dimensions; as a last line of defence
 * the kernels fill their outputs with NaN instead of overrunning the stack.
 */

/* A quiet NaN, built from the prelude's -inf (-inf * 0 = NaN). */
PPK_FN float ppk_attn_nan(void) { return PPK_NEG_INF * 0.0f; }

/* Dot product of two length-D float vectors. */
/* Eight independent partial sums (lanes d mod 8), added in a fixed order: the compiler can keep
 * them in one vector register instead of one serial chain of D dependent adds, and the result
 * does not depend on the thread count or the target. */
PPK_FN float ppk_attn_dot(const float *PPK_RESTRICT a, const float *PPK_RESTRICT b, int64_t D) {
    float p[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int64_t d = 0;
    for (; d + 8 <= D; d += 8)
        for (int k = 0; k < 8; k++) p[k] += a[d + k] * b[d + k];
    for (int k = 0; k < 8 && d + k < D; k++) p[k] += a[d + k] * b[d + k];
    return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

/*
 * Forward, rows = B*HQ*S, row = (b*HQ + h)*S + i:
 *   o[i,b,h,:] = sum_j P_ij v_j,   lse[row] = log sum_j exp(s_ij)
 * One pass over the keys with an online softmax: m is the running maximum of
 * the scores, l = sum_j exp(s_ij - m) and acc = sum_j exp(s_ij - m) v_j; both
 * are rescaled by exp(m_old - m_new) whenever the maximum grows, so no
 * exponent is ever positive. Then o = acc / l and lse = m + log(l).
 */
PPK_FN void ppk_attention_fwd_row(const float *PPK_RESTRICT q, const float *PPK_RESTRICT k,
                                  const float *PPK_RESTRICT v, float *PPK_RESTRICT o,
                                  float *PPK_RESTRICT lse, int64_t S, int64_t B, int64_t HQ,
                                  int64_t HK, int64_t D, float scale, int causal, int64_t row) {
    const int64_t i = row % S;
    const int64_t bh = row / S; /* b*HQ + h */
    const int64_t h = bh % HQ;
    const int64_t b = bh / HQ;
    const int64_t g = h / (HQ / HK);
    const float *PPK_RESTRICT qi = q + ((i * B + b) * HQ + h) * D;
    float *PPK_RESTRICT oi = o + ((i * B + b) * HQ + h) * D;
    if (D > PPK_MAX_HEAD_DIM) {
        for (int64_t d = 0; d < D; d++) oi[d] = ppk_attn_nan();
        lse[row] = ppk_attn_nan();
        return;
    }
    const int64_t kv_stride = B * HK * D; /* distance between consecutive positions j */
    const float *kb = k + (b * HK + g) * D;
    const float *vb = v + (b * HK + g) * D;
    const int64_t jend = causal ? i + 1 : S;

    float acc[PPK_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    float m = PPK_NEG_INF, l = 0.0f;
    for (int64_t j = 0; j < jend; j++) {
        const float *kj = kb + j * kv_stride;
        const float *vj = vb + j * kv_stride;
        const float s = scale * ppk_attn_dot(qi, kj, D);
        if (s > m) {
            /* New maximum: rescale what was accumulated (exp(-inf) = 0 on the first key). */
            const float c = expf(m - s);
            l *= c;
            for (int64_t d = 0; d < D; d++) acc[d] *= c;
            m = s;
        }
        const float p = expf(s - m);
        l += p;
        for (int64_t d = 0; d < D; d++) acc[d] += p * vj[d];
    }
    /* jend >= 1 always (S >= 1, and query i sees key i), so l >= 1. */
    const float inv_l = 1.0f / l;
    for (int64_t d = 0; d < D; d++) oi[d] = acc[d] * inv_l;
    lse[row] = m + logf(l);
}

/*
 * Query gradient, rows = B*HQ*S, row = (b*HQ + h)*S + i:
 *   delta[row]  = dout_i . o_i
 *   dq[i,b,h,:] = scale * sum_j P_ij (dP_ij - delta_i) k_j
 * dq is overwritten. This pass must run before dk, which reads delta.
 */
PPK_FN void ppk_attention_dq_row(const float *PPK_RESTRICT q, const float *PPK_RESTRICT k,
                                 const float *PPK_RESTRICT v, const float *PPK_RESTRICT o,
                                 const float *PPK_RESTRICT lse, const float *PPK_RESTRICT dout,
                                 float *PPK_RESTRICT dq, float *PPK_RESTRICT delta, int64_t S,
                                 int64_t B, int64_t HQ, int64_t HK, int64_t D, float scale,
                                 int causal, int64_t row) {
    const int64_t i = row % S;
    const int64_t bh = row / S;
    const int64_t h = bh % HQ;
    const int64_t b = bh / HQ;
    const int64_t g = h / (HQ / HK);
    const int64_t qoff = ((i * B + b) * HQ + h) * D;
    const float *PPK_RESTRICT qi = q + qoff;
    const float *PPK_RESTRICT doi = dout + qoff;
    float *PPK_RESTRICT dqi = dq + qoff;
    if (D > PPK_MAX_HEAD_DIM) {
        for (int64_t d = 0; d < D; d++) dqi[d] = ppk_attn_nan();
        delta[row] = ppk_attn_nan();
        return;
    }
    const float di = ppk_attn_dot(doi, o + qoff, D);
    delta[row] = di;
    const float lse_i = lse[row];
    const int64_t kv_stride = B * HK * D;
    const float *kb = k + (b * HK + g) * D;
    const float *vb = v + (b * HK + g) * D;
    const int64_t jend = causal ? i + 1 : S;

    float acc[PPK_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    for (int64_t j = 0; j < jend; j++) {
        const float *kj = kb + j * kv_stride;
        const float *vj = vb + j * kv_stride;
        const float p = expf(scale * ppk_attn_dot(qi, kj, D) - lse_i);
        const float ds = p * (ppk_attn_dot(doi, vj, D) - di);
        for (int64_t d = 0; d < D; d++) acc[d] += ds * kj[d];
    }
    for (int64_t d = 0; d < D; d++) dqi[d] = scale * acc[d];
}

/*
 * Key gradient, rows = B*HK*S, row = (b*HK + g)*S + j:
 *   dk[j,b,g,:] = scale * sum_{h in group g} sum_i P_ij (dP_ij - delta_i) q_i
 * with i >= j under the causal mask. Reads delta from the dq pass. dk is
 * overwritten; o is unused.
 */
PPK_FN void ppk_attention_dk_row(const float *PPK_RESTRICT q, const float *PPK_RESTRICT k,
                                 const float *PPK_RESTRICT v, const float *PPK_RESTRICT o,
                                 const float *PPK_RESTRICT lse, const float *PPK_RESTRICT dout,
                                 const float *PPK_RESTRICT delta, float *PPK_RESTRICT dk,
                                 int64_t S, int64_t B, int64_t HQ, int64_t HK, int64_t D,
                                 float scale, int causal, int64_t row) {
    (void)o;
    const int64_t j = row % S;
    const int64_t bg = row / S; /* b*HK + g */
    const int64_t g = bg % HK;
    const int64_t b = bg / HK;
    const int64_t kvoff = ((j * B + b) * HK + g) * D;
    const float *PPK_RESTRICT kj = k + kvoff;
    const float *PPK_RESTRICT vj = v + kvoff;
    float *PPK_RESTRICT dkj = dk + kvoff;
    if (D > PPK_MAX_HEAD_DIM) {
        for (int64_t d = 0; d < D; d++) dkj[d] = ppk_attn_nan();
        return;
    }
    const int64_t group = HQ / HK;
    const int64_t q_stride = B * HQ * D; /* distance between consecutive positions i */
    const int64_t istart = causal ? j : 0;

    float acc[PPK_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
        const float *qb = q + (b * HQ + h) * D;
        const float *dob = dout + (b * HQ + h) * D;
        const float *lse_bh = lse + (b * HQ + h) * S;
        const float *delta_bh = delta + (b * HQ + h) * S;
        for (int64_t i = istart; i < S; i++) {
            const float *qi = qb + i * q_stride;
            const float *doi = dob + i * q_stride;
            const float p = expf(scale * ppk_attn_dot(qi, kj, D) - lse_bh[i]);
            const float ds = p * (ppk_attn_dot(doi, vj, D) - delta_bh[i]);
            for (int64_t d = 0; d < D; d++) acc[d] += ds * qi[d];
        }
    }
    for (int64_t d = 0; d < D; d++) dkj[d] = scale * acc[d];
}

/*
 * Value gradient, rows = B*HK*S, row = (b*HK + g)*S + j:
 *   dv[j,b,g,:] = sum_{h in group g} sum_i P_ij dout_i
 * with i >= j under the causal mask. dv is overwritten; o and v are unused.
 */
PPK_FN void ppk_attention_dv_row(const float *PPK_RESTRICT q, const float *PPK_RESTRICT k,
                                 const float *PPK_RESTRICT v, const float *PPK_RESTRICT o,
                                 const float *PPK_RESTRICT lse, const float *PPK_RESTRICT dout,
                                 float *PPK_RESTRICT dv, int64_t S, int64_t B, int64_t HQ,
                                 int64_t HK, int64_t D, float scale, int causal, int64_t row) {
    (void)o;
    (void)v;
    const int64_t j = row % S;
    const int64_t bg = row / S;
    const int64_t g = bg % HK;
    const int64_t b = bg / HK;
    const int64_t kvoff = ((j * B + b) * HK + g) * D;
    const float *PPK_RESTRICT kj = k + kvoff;
    float *PPK_RESTRICT dvj = dv + kvoff;
    if (D > PPK_MAX_HEAD_DIM) {
        for (int64_t d = 0; d < D; d++) dvj[d] = ppk_attn_nan();
        return;
    }
    const int64_t group = HQ / HK;
    const int64_t q_stride = B * HQ * D;
    const int64_t istart = causal ? j : 0;

    float acc[PPK_MAX_HEAD_DIM];
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
        const float *qb = q + (b * HQ + h) * D;
        const float *dob = dout + (b * HQ + h) * D;
        const float *lse_bh = lse + (b * HQ + h) * S;
        for (int64_t i = istart; i < S; i++) {
            const float *doi = dob + i * q_stride;
            const float p = expf(scale * ppk_attn_dot(qb + i * q_stride, kj, D) - lse_bh[i]);
            for (int64_t d = 0; d < D; d++) acc[d] += p * doi[d];
        }
    }
    for (int64_t d = 0; d < D; d++) dvj[d] = acc[d];
}
