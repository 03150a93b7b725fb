/* The hidden nonlinearity and readout of the batched MLP probes, forward and backward, fused.

   For G groups of probes, Q queries each, hidden width H, a minibatch of B samples and K
   outputs (all float32, C order):

       pre[g, q, h, i] = base[g, h, i] + off[g, q, h]          (off may be NULL: 0)
       act             = GELU(pre)                              (exact, erf form)
       out[g, q, k, i] = bias[g, k] + sum_h w[g, k, h] act[g, q, h, i]
       r               = out - y[t(g, q), k, i],   t(g, q) = (g Q + q) mod SY

   loss[g] = sum over q, k, i of r^2. With gradients on (grad != 0), for the loss
   L = (scale / 2) sum_g loss[g]:

       g_base[g, h, i] = sum_q dL/dpre[g, q, h, i]   (overwritten)
       g_off[g, q, h]  = sum_i dL/dpre[g, q, h, i]   (overwritten; skipped when off is NULL)
       g_w[g, k, h]    = dL/dw,   g_bias[g, k] = dL/dbias       (overwritten)

   gelu_readout_mode adds two modes: MODE_FORWARD writes out [G, Q, K, B] and nothing
   else; MODE_GIVEN takes r = y (y[t(g, q), k, i] given, with SY = G Q one slice per
   (group, query)), so the gradients are those of any loss whose dL/dout is scale * y:
   the critic probe's mixture, whose outputs feed a density PyTorch differentiates.

   The query probe is G = cells, Q = SY = positions, off = the query offsets; the
   per-target MLP probes are G = cells x targets, Q = 1, SY = targets, off = the first
   layer's bias. Nothing of size Q H B is written to memory: a block of V samples is
   carried through GELU, the readout, the residual and back in local arrays, with one exp
   per element serving both erf and the GELU derivative. erf is Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, the
   approximation PyTorch's vectorised CPU erf uses); exp is a degree-7 polynomial after
   reduction by ln 2 (relative error below 2e-7 on the range used, x <= 0).

   Compiled at first use by infoprobe.probes.native with -O3 -march=native and
   reassociation allowed, so the inner loops over the V samples of a block vectorise. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define V 16   /* samples per block: one vector (one AVX-512 register, two AVX2 ones) */
#define KMAX 16
#define MODE_RESIDUAL 0  /* r = out - y: the squared-error loss and its gradients */
#define MODE_FORWARD 1   /* write out[g, q, k, i] into out_w ([G, Q, K, B]); no loss, no grad */
#define MODE_GIVEN 2     /* r = y: y is dL/dout / scale, for any loss of out (the critic) */

typedef float vf __attribute__((vector_size(4 * V)));
typedef int32_t vi __attribute__((vector_size(4 * V)));

int gelu_readout_kmax(void) { return KMAX; }

static inline vf splat(float a) { return (vf){0} + a; }

static inline vf load(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }

static inline void store(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* The first n lanes from p, zeros after. */
static inline vf load_part(const float *p, int64_t n) {
    float tmp[V] = {0};
    memcpy(tmp, p, sizeof(float) * (size_t)n);
    return load(tmp);
}

static inline float sum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < V; i++) s += v[i];
    return s;
}

/* exp(x) for x <= 0 (clamped below at -87, where exp is below 1.7e-38). */
static inline vf exp_nonpositive(vf x) {
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-6f;
    vi low = x < splat(-87.0f);
    x = (vf)((low & (vi)splat(-87.0f)) | (~low & (vi)x));
    vi n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, vi);  /* round, ties down */
    vf nf = __builtin_convertvector(n, vf);
    vf r = x - nf * ln2_hi - nf * ln2_lo;  /* |r| <= ln2 / 2 + rounding */
    vf p = splat(1.0f / 5040.0f);
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * (vf)((n + 127) << 23);  /* times 2^n, n >= -126 */
}

/* GELU(x) = x Phi(x) and its slope Phi(x) + x phi(x), from one exp(-x^2 / 2). */
static inline void gelu(vf x, vf *act, vf *slope) {
    vf e = exp_nonpositive(-0.5f * x * x);
    vi sign = (vi)x & (int32_t)0x80000000;
    vf au = (vf)((vi)x ^ sign) * 0.70710678118654752f;  /* |x| / sqrt 2 */
    vf t = 1.0f / (1.0f + 0.3275911f * au);
    vf poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t
               + 0.254829592f) * t;
    vf half_erf = 0.5f - 0.5f * poly * e;  /* erf(|x| / sqrt 2) / 2 */
    vf cdf = 0.5f + (vf)((vi)half_erf ^ sign);
    *act = x * cdf;
    *slope = cdf + x * 0.39894228040143268f * e;
}

/* Returns 0, or -1 when K is not in 1..KMAX or scratch memory is unavailable.

   Per (group, query): a forward sweep over blocks of V samples (all H units of a block,
   then its residual) keeps act and slope of every block, [H][NB] vectors, and the
   residual gradient [K][NB]; the backward sweep then runs unit by unit over the blocks,
   so the K weight-gradient sums and the offset's sum of a unit stay in registers. */
int gelu_readout_mode(int64_t G, int64_t Q, int64_t H, int64_t B, int64_t K, int64_t SY,
                      const float *base, const float *off, const float *w, const float *bias,
                      const float *y, float scale, int grad, float *loss, float *g_base,
                      float *g_off, float *g_w, float *g_bias, int mode, float *out_w) {
    if (K > KMAX || K < 1 || mode < MODE_RESIDUAL || mode > MODE_GIVEN) return -1;
    if (mode == MODE_FORWARD) grad = 0;
    const int64_t NB = (B + V - 1) / V;  /* blocks of samples, the last one maybe partial */
    vf *scratch = aligned_alloc(sizeof(vf), sizeof(vf) * (size_t)((2 * H + K) * NB + K * H));
    if (scratch == NULL) return -1;
    vf *as = scratch, *ds = as + H * NB, *grs = ds + H * NB, *acc_w = grs + K * NB;

    for (int64_t g = 0; g < G; g++) {
        const float *bg = base + g * H * B, *wg = w + g * K * H;
        float *gbase = g_base ? g_base + g * H * B : NULL;
        vf loss_acc = splat(0.0f), bias_acc[KMAX];
        for (int64_t k = 0; k < K; k++) bias_acc[k] = splat(0.0f);
        if (grad) {
            if (Q > 1) memset(gbase, 0, sizeof(float) * (size_t)(H * B));
            for (int64_t j = 0; j < K * H; j++) acc_w[j] = splat(0.0f);
        }
        for (int64_t q = 0; q < Q; q++) {
            const float *oq = off ? off + (g * Q + q) * H : NULL;
            const float *yq = y ? y + ((g * Q + q) % SY) * K * B : NULL;
            for (int64_t j = 0; j < NB; j++) {  /* forward: GELU, readout, residual */
                int64_t i0 = j * V, nv = B - i0 < V ? B - i0 : V;
                vf out[KMAX];
                for (int64_t k = 0; k < K; k++) out[k] = splat(bias[g * K + k]);
                for (int64_t h = 0; h < H; h++) {
                    const float *bh = bg + h * B + i0;
                    vf x = (nv == V ? load(bh) : load_part(bh, nv)) + (oq ? oq[h] : 0.0f);
                    vf a, d;
                    gelu(x, &a, &d);
                    as[h * NB + j] = a;
                    ds[h * NB + j] = d;
                    if (mode != MODE_GIVEN)
                        for (int64_t k = 0; k < K; k++) out[k] += wg[k * H + h] * a;
                }
                if (mode == MODE_FORWARD) {  /* out[g, q, k, i], nothing else */
                    float *oo = out_w + (g * Q + q) * K * B + i0;
                    for (int64_t k = 0; k < K; k++)
                        for (int v = 0; v < nv; v++) oo[k * B + v] = out[k][v];
                    continue;
                }
                vf mask = splat(0.0f);
                for (int v = 0; v < nv; v++) mask[v] = 1.0f;
                for (int64_t k = 0; k < K; k++) {
                    const float *yk = yq + k * B + i0;
                    vf yv = nv == V ? load(yk) : load_part(yk, nv);
                    vf r = (mode == MODE_GIVEN ? yv : out[k] - yv) * mask;
                    loss_acc += r * r;
                    grs[k * NB + j] = scale * r;  /* 0 in the padding lanes */
                    bias_acc[k] += scale * r;
                }
            }
            if (!grad) continue;
            for (int64_t h = 0; h < H; h++) {  /* backward, one unit at a time */
                vf wh[KMAX], acc[KMAX], acc_o = splat(0.0f);
                for (int64_t k = 0; k < K; k++) {
                    wh[k] = splat(wg[k * H + h]);
                    acc[k] = splat(0.0f);
                }
                float *gb = gbase + h * B;
                for (int64_t j = 0; j < NB; j++) {
                    vf a = as[h * NB + j], ga = wh[0] * grs[j];
                    for (int64_t k = 1; k < K; k++) ga += wh[k] * grs[k * NB + j];
                    vf gp = ga * ds[h * NB + j];
                    acc_o += gp;
                    for (int64_t k = 0; k < K; k++) acc[k] += grs[k * NB + j] * a;
                    int64_t i0 = j * V, nv = B - i0 < V ? B - i0 : V;
                    if (nv == V) {
                        store(gb + i0, Q == 1 ? gp : load(gb + i0) + gp);
                    } else {
                        for (int v = 0; v < nv; v++) gb[i0 + v] = (Q == 1 ? 0.0f : gb[i0 + v]) + gp[v];
                    }
                }
                for (int64_t k = 0; k < K; k++) acc_w[k * H + h] += acc[k];
                if (off) g_off[(g * Q + q) * H + h] = sum(acc_o);
            }
        }
        loss[g] = sum(loss_acc);
        if (!grad) continue;
        for (int64_t k = 0; k < K; k++) {
            g_bias[g * K + k] = sum(bias_acc[k]);
            for (int64_t h = 0; h < H; h++) g_w[(g * K + k) * H + h] = sum(acc_w[k * H + h]);
        }
    }
    free(scratch);
    return 0;
}

/* The MSE form above (mode MODE_RESIDUAL), the interface of the MLP and query probes. */
int gelu_readout(int64_t G, int64_t Q, int64_t H, int64_t B, int64_t K, int64_t SY,
                 const float *base, const float *off, const float *w, const float *bias,
                 const float *y, float scale, int grad, float *loss, float *g_base,
                 float *g_off, float *g_w, float *g_bias) {
    return gelu_readout_mode(G, Q, H, B, K, SY, base, off, w, bias, y, scale, grad, loss,
                             g_base, g_off, g_w, g_bias, MODE_RESIDUAL, NULL);
}

/* ---- the critic probe's mixture: responsibilities and gradients, fused -----------------

   For C cells, S positions, P = KC + 2 mixture parts (null, positional, KC content), k
   coordinates and B samples (float32, C order), per (c, s, i):

       q_pos  = sum_a (z[c,s,a,i] - pm[c,s,a,i])^2 piv[c,s,i]
       q_j    = sum_a (z[c,s,a,i] - cm[c,j,a,i])^2 civ[c,j,a,i]          (j < KC)
       part_0 = lp[c,s,0,i] + nul[c,s,i]
       part_1 = lp[c,s,1,i] + pn[c,s,i] - q_pos / 2 + ld[c]
       part_j = lp[c,s,2+j,i] + cn[c,j,i] - q_j / 2 + ld[c]
       r      = softmax over the P parts (the responsibilities)

   and for L = scale * sum log(sum_p exp(part_p)) the gradients with respect to lp, pm,
   piv, pn, z (per element, overwritten), cm, civ, cn (summed over s, overwritten) and ld
   (summed, overwritten). Every exp has a non-positive argument (part - max). */
int critic_mixture(int64_t C, int64_t S, int64_t KC, int64_t k, int64_t B,
                   const float *lp, const float *pm, const float *piv, const float *pn,
                   const float *cm, const float *civ, const float *cn, const float *z,
                   const float *nul, const float *ld, float scale,
                   float *g_lp, float *g_pm, float *g_piv, float *g_pn, float *g_cm,
                   float *g_civ, float *g_cn, float *g_z, float *g_ld) {
    const int64_t P = KC + 2;
    if (KC < 1 || KC > KMAX - 2 || k < 1 || k > KMAX) return -1;
    memset(g_cm, 0, sizeof(float) * (size_t)(C * KC * k * B));
    memset(g_civ, 0, sizeof(float) * (size_t)(C * KC * k * B));
    memset(g_cn, 0, sizeof(float) * (size_t)(C * KC * B));
    for (int64_t c = 0; c < C; c++) {
        vf ld_acc = splat(0.0f);
        const float ldc = ld[c];
        for (int64_t s = 0; s < S; s++) {
            const int64_t cs = c * S + s;
            for (int64_t i0 = 0; i0 < B; i0 += V) {
                const int64_t nv = B - i0 < V ? B - i0 : V;
#define LD(p) (nv == V ? load(p) : load_part(p, nv))
                vf zz[KMAX], part[KMAX], dpos[KMAX], dc[KMAX - 2][KMAX];
                for (int64_t a = 0; a < k; a++) zz[a] = LD(z + (cs * k + a) * B + i0);
                vf iv = LD(piv + cs * B + i0), qpos = splat(0.0f);
                for (int64_t a = 0; a < k; a++) {
                    dpos[a] = zz[a] - LD(pm + (cs * k + a) * B + i0);
                    qpos += dpos[a] * dpos[a] * iv;
                }
                part[0] = LD(lp + (cs * P) * B + i0) + LD(nul + cs * B + i0);
                part[1] = LD(lp + (cs * P + 1) * B + i0) + LD(pn + cs * B + i0) - 0.5f * qpos + ldc;
                for (int64_t j = 0; j < KC; j++) {
                    const int64_t cj = c * KC + j;
                    vf q = splat(0.0f);
                    for (int64_t a = 0; a < k; a++) {
                        dc[j][a] = zz[a] - LD(cm + (cj * k + a) * B + i0);
                        q += dc[j][a] * dc[j][a] * LD(civ + (cj * k + a) * B + i0);
                    }
                    part[2 + j] = LD(lp + (cs * P + 2 + j) * B + i0) + LD(cn + cj * B + i0)
                                  - 0.5f * q + ldc;
                }
                vf top = part[0];
                for (int64_t p = 1; p < P; p++) top = (vf)((vi)(part[p] > top) & (vi)part[p]
                                                           | ~(vi)(part[p] > top) & (vi)top);
                vf total = splat(0.0f);
                for (int64_t p = 0; p < P; p++) {
                    part[p] = exp_nonpositive(part[p] - top);
                    total += part[p];
                }
                vf mask = splat(0.0f);
                for (int v = 0; v < nv; v++) mask[v] = 1.0f;
                vf w = scale * mask / total;  /* dL/dpart_p = w * exp(part_p - top) */
                vf gz[KMAX];
                for (int64_t p = 0; p < P; p++) part[p] *= w;
#define ST(p, v) do { float *q_ = (p); vf v_ = (v); \
                      if (nv == V) store(q_, v_); else for (int u = 0; u < nv; u++) q_[u] = v_[u]; \
                  } while (0)
                for (int64_t p = 0; p < P; p++) ST(g_lp + (cs * P + p) * B + i0, part[p]);
                ST(g_pn + cs * B + i0, part[1]);
                vf sq = splat(0.0f);
                for (int64_t a = 0; a < k; a++) {
                    sq += dpos[a] * dpos[a];
                    vf g = -part[1] * dpos[a] * iv;  /* dL/dz_a from the positional part */
                    gz[a] = g;
                    ST(g_pm + (cs * k + a) * B + i0, -g);
                }
                ST(g_piv + cs * B + i0, -0.5f * part[1] * sq);
                vf used = part[1];
                for (int64_t j = 0; j < KC; j++) {
                    const int64_t cj = c * KC + j;
                    used += part[2 + j];
                    float *gcn = g_cn + cj * B + i0;
                    vf prev = LD(gcn);
                    ST(gcn, prev + part[2 + j]);
                    for (int64_t a = 0; a < k; a++) {
                        const int64_t at = (cj * k + a) * B + i0;
                        vf civa = LD(civ + at), d = dc[j][a];
                        vf g = -part[2 + j] * d * civa;
                        gz[a] += g;
                        ST(g_cm + at, LD(g_cm + at) - g);
                        ST(g_civ + at, LD(g_civ + at) - 0.5f * part[2 + j] * d * d);
                    }
                }
                for (int64_t a = 0; a < k; a++) ST(g_z + (cs * k + a) * B + i0, gz[a]);
                ld_acc += used;
#undef LD
#undef ST
            }
        }
        g_ld[c] = sum(ld_acc);
    }
    return 0;
}
