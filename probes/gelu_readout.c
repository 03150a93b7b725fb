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

   gelu_readout_mode adds MODE_FORWARD, which writes out [G, Q, K, B] and nothing else;
   critic_pass (below) runs the same pass with the critic's mixture in place of the
   residual.

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
#define MODE_MIXTURE 2   /* dL/dout from the critic's mixture (critic_pass); no loss */

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

/* log(x) for normal x > 0: exponent and mantissa m in [sqrt(1/2), sqrt 2), then
   log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series to s^9
   (truncation below 1e-9). */
static inline vf log_positive(vf x) {
    vi bits = (vi)x;
    vi e = ((bits >> 23) & 0xff) - 127;
    vf m = (vf)((bits & 0x007fffff) | 0x3f800000);  /* [1, 2) */
    vi big = m > splat(1.41421356237f);
    m = (vf)((big & (vi)(m * 0.5f)) | (~big & (vi)m));
    e -= big;  /* big is -1 where m was halved */
    vf f = m - 1.0f, t = f / (m + 1.0f), t2 = t * t;
    vf p = ((((1.0f / 9.0f) * t2 + 1.0f / 7.0f) * t2 + 1.0f / 5.0f) * t2 + 1.0f / 3.0f) * t2 + 1.0f;
    return 2.0f * t * p + __builtin_convertvector(e, vf) * 0.69314718055994531f;
}

static inline vf vmax(vf a, vf b) { vi gt = a > b; return (vf)((gt & (vi)a) | (~gt & (vi)b)); }

/* softplus(x) = log(1 + exp(x)) >= 0 and -log sigmoid(x) = softplus(-x) = softplus(x) - x. */
static inline vf softplus(vf x, vf *neg_log_sigmoid) {
    vf tail = log_positive(1.0f + exp_nonpositive(-vmax(x, -x)));
    *neg_log_sigmoid = tail + vmax(-x, splat(0.0f));
    return tail + vmax(x, splat(0.0f));
}

/* ---- the critic probe's mixture: dL/dout of one block of samples ---------------------

   For C cells, S positions, P = KC + 2 mixture parts (null, positional, KC content), k
   coordinates, R = P + k + 1 readout rows and B samples (float32, C order), per (c, s, i):
   the readout o[c, s, :, i] holds P logits, the k positional means pm and the raw
   positional log-scale u; the targets are y[s, b, i] ([S, k, B]); with FL = the scale floor,

       lp     = log_softmax(logits),  pls = FL + softplus(u - FL),  piv = exp(-2 pls)
       z_a    = sum_b rot[c, a, b] y[s, b, i]                     (the cell's basis)
       part_0 = lp_0 + nul[c,s,i]
       part_1 = lp_1 - k pls - k log(2 pi) / 2 - piv sum_a (z_a - pm_a)^2 / 2 + ld[c]
       part_j = lp_j + cn[c,j,i] - sum_a civ[c,j,a,i] (z_a - cm[c,j,a,i])^2 / 2 + ld[c]

   (j = 2 .. P-1 for the content components j - 2). For L = scale * sum log sum_p
   exp(part_p), mixture_block gives dL/do of a block of samples and adds to dL/d cm, civ,
   cn (in memory, [C, KC, k, B] and [C, KC, B]) and to the per-lane sums of dL/drot and
   dL/dld (acc, [C][k k + 1] vectors); with ll, it adds the block's log mixture to ll[c].
   Every exp has a non-positive argument. */
typedef struct {
    int64_t S, KC, k, B;
    float floor_, scale;
    const float *cm, *civ, *cn, *y, *rot, *nul, *ld;
    float *g_cm, *g_civ, *g_cn;
    vf *acc;  /* [C][k k + 1]: dL/drot and dL/dld per lane; NULL: no gradients */
    vf *ll;   /* [C]: the summed log mixture per lane; NULL: not wanted */
} Mixture;

static inline void mixture_block(const Mixture *mx, int64_t c, int64_t s, int64_t i0,
                                 int64_t nv, const vf *o, vf *go) {
    const int64_t KC = mx->KC, k = mx->k, B = mx->B, P = KC + 2, cs = c * mx->S + s;
    const float floor_ = mx->floor_, scale = mx->scale, *rc = mx->rot + c * k * k;
    const float half_log = 0.91893853320467274f * (float)k;  /* k log(2 pi) / 2 */
#define LD(p) (nv == V ? load(p) : load_part(p, nv))
#define ST(p, v) do { float *q_ = (p); vf v_ = (v); \
                      if (nv == V) store(q_, v_); else for (int u_ = 0; u_ < nv; u_++) q_[u_] = v_[u_]; \
                  } while (0)
    vf yy[KMAX], zz[KMAX], part[KMAX], pi[KMAX], dpos[KMAX], dc[KMAX - 2][KMAX];
    for (int64_t b = 0; b < k; b++) yy[b] = LD(mx->y + (s * k + b) * B + i0);
    for (int64_t a = 0; a < k; a++) {
        zz[a] = splat(0.0f);
        for (int64_t b = 0; b < k; b++) zz[a] += rc[a * k + b] * yy[b];
    }
    vf ltop = o[0];  /* log_softmax of the logits */
    for (int64_t p = 1; p < P; p++) ltop = vmax(ltop, o[p]);
    vf lsum = splat(0.0f);
    for (int64_t p = 0; p < P; p++) {
        pi[p] = exp_nonpositive(o[p] - ltop);
        lsum += pi[p];
    }
    vf lnorm = ltop + log_positive(lsum), rs = 1.0f / lsum, nls;
    vf sp = softplus(o[P + k] - floor_, &nls);
    vf pls = floor_ + sp;
    vf iv = exp_nonpositive(-2.0f * sp) * __builtin_expf(-2.0f * floor_);
    vf qpos = splat(0.0f);
    for (int64_t a = 0; a < k; a++) {
        dpos[a] = zz[a] - o[P + a];
        qpos += dpos[a] * dpos[a] * iv;
    }
    const float ldc = mx->ld[c];
    part[0] = o[0] - lnorm + LD(mx->nul + cs * B + i0);
    part[1] = o[1] - lnorm - (float)k * pls - half_log - 0.5f * qpos + ldc;
    for (int64_t j = 0; j < KC; j++) {
        const int64_t cj = c * KC + j;
        vf q = splat(0.0f);
        for (int64_t a = 0; a < k; a++) {
            dc[j][a] = zz[a] - LD(mx->cm + (cj * k + a) * B + i0);
            q += dc[j][a] * dc[j][a] * LD(mx->civ + (cj * k + a) * B + i0);
        }
        part[2 + j] = o[2 + j] - lnorm + LD(mx->cn + cj * B + i0) - 0.5f * q + ldc;
    }
    vf top = part[0];
    for (int64_t p = 1; p < P; p++) top = vmax(top, part[p]);
    vf total = splat(0.0f);
    for (int64_t p = 0; p < P; p++) {
        part[p] = exp_nonpositive(part[p] - top);
        total += part[p];
    }
    vf mask = splat(0.0f);
    for (int v = 0; v < nv; v++) mask[v] = 1.0f;
    if (mx->ll) mx->ll[c] += (top + log_positive(total)) * mask;
    if (mx->acc == NULL) return;
    vf w = scale * mask / total;  /* dL/dpart_p = w * exp(part_p - top) */
    for (int64_t p = 0; p < P; p++) {
        part[p] *= w;
        /* through log_softmax: dL/dlogit_p = dL/dpart_p - pi_p sum_q dL/dpart_q */
        go[p] = part[p] - scale * mask * pi[p] * rs;
    }
    vf gz[KMAX], sq = splat(0.0f);
    for (int64_t a = 0; a < k; a++) {
        sq += dpos[a] * dpos[a];
        gz[a] = -part[1] * dpos[a] * iv;  /* dL/dz_a from the positional part */
        go[P + a] = -gz[a];
    }
    /* dL/du through pls (-k), piv (-2 piv) and the floor (sigmoid) */
    go[P + k] = part[1] * (iv * sq - (float)k) * exp_nonpositive(-nls);
    vf used = part[1];
    for (int64_t j = 0; j < KC; j++) {
        const int64_t cj = c * KC + j;
        used += part[2 + j];
        float *gcn = mx->g_cn + cj * B + i0;
        ST(gcn, LD(gcn) + part[2 + j]);
        for (int64_t a = 0; a < k; a++) {
            const int64_t at = (cj * k + a) * B + i0;
            vf d = dc[j][a], g = -part[2 + j] * d * LD(mx->civ + at);
            gz[a] += g;
            ST(mx->g_cm + at, LD(mx->g_cm + at) - g);
            ST(mx->g_civ + at, LD(mx->g_civ + at) - 0.5f * part[2 + j] * d * d);
        }
    }
    vf *acc = mx->acc + c * (k * k + 1);
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < k; b++) acc[a * k + b] += gz[a] * yy[b];
    acc[k * k] += used;
#undef LD
#undef ST
}

/* Returns 0, or -1 when K is not in 1..KMAX or scratch memory is unavailable.

   Per (group, query): a forward sweep over blocks of V samples (all H units of a block,
   then its residual) keeps act and slope of every block, [H][NB] vectors, and the
   residual gradient [K][NB]; the backward sweep then runs unit by unit over the blocks,
   so the K weight-gradient sums and the offset's sum of a unit stay in registers. */
static int readout_pass(int64_t G, int64_t Q, int64_t H, int64_t B, int64_t K, int64_t SY,
                        const float *base, const float *off, const float *w, const float *bias,
                        const float *y, float scale, int grad, float *loss, float *g_base,
                        float *g_off, float *g_w, float *g_bias, int mode, float *out_w,
                        const Mixture *mx) {
    if (K > KMAX || K < 1 || mode < MODE_RESIDUAL || mode > MODE_MIXTURE) return -1;
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
                    for (int64_t k = 0; k < K; k++) out[k] += wg[k * H + h] * a;
                }
                if (mode == MODE_FORWARD) {  /* out[g, q, k, i], nothing else */
                    float *oo = out_w + (g * Q + q) * K * B + i0;
                    for (int64_t k = 0; k < K; k++)
                        for (int v = 0; v < nv; v++) oo[k * B + v] = out[k][v];
                    continue;
                }
                if (mode == MODE_MIXTURE) {  /* dL/dout, scaled and 0 in the padding */
                    vf go[KMAX];
                    mixture_block(mx, g, q, i0, nv, out, go);
                    for (int64_t k = 0; grad && k < K; k++) {
                        grs[k * NB + j] = go[k];
                        bias_acc[k] += go[k];
                    }
                    continue;
                }
                vf mask = splat(0.0f);
                for (int v = 0; v < nv; v++) mask[v] = 1.0f;
                for (int64_t k = 0; k < K; k++) {
                    const float *yk = yq + k * B + i0;
                    vf yv = nv == V ? load(yk) : load_part(yk, nv);
                    vf r = (out[k] - yv) * mask;
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

int gelu_readout_mode(int64_t G, int64_t Q, int64_t H, int64_t B, int64_t K, int64_t SY,
                      const float *base, const float *off, const float *w, const float *bias,
                      const float *y, float scale, int grad, float *loss, float *g_base,
                      float *g_off, float *g_w, float *g_bias, int mode, float *out_w) {
    if (mode == MODE_MIXTURE) return -1;
    return readout_pass(G, Q, H, B, K, SY, base, off, w, bias, y, scale, grad, loss, g_base,
                        g_off, g_w, g_bias, mode, out_w, NULL);
}

/* The MSE form above (mode MODE_RESIDUAL), the interface of the MLP and query probes. */
int gelu_readout(int64_t G, int64_t Q, int64_t H, int64_t B, int64_t K, int64_t SY,
                 const float *base, const float *off, const float *w, const float *bias,
                 const float *y, float scale, int grad, float *loss, float *g_base,
                 float *g_off, float *g_w, float *g_bias) {
    return gelu_readout_mode(G, Q, H, B, K, SY, base, off, w, bias, y, scale, grad, loss,
                             g_base, g_off, g_w, g_bias, MODE_RESIDUAL, NULL);
}

/* ---- the critic probe's null: its log-density and sufficient statistics --------------

   For C cells, S positions, K0 components, k coordinates and B samples (float32, C order),
   with targets z[s, a, i] ([S, k, B]) and per component j of (c, s) its mean m[c,s,j,a],
   inverse variance iv[c,s,j,a] and constant cst[c,s,j] (log weight - sum_a log sigma_a
   - k log(2 pi) / 2):

       part_j = cst[c,s,j] - sum_a iv (z - m)^2 / 2,     out[c,s,i] = log sum_j exp(part_j)

   and the sums over i of the responsibilities g_j = exp(part_j - out) against the features
   [z^2, z, 1]: stats[c,s,j,:] = [sum g_j z_a^2 (k values), sum g_j z_a (k), sum g_j]
   (overwritten). */
int critic_null(int64_t C, int64_t S, int64_t K0, int64_t k, int64_t B, const float *z,
                const float *m, const float *iv, const float *cst, float *out, float *stats) {
    if (K0 < 1 || K0 > KMAX || k < 1 || k > KMAX) return -1;
    const int64_t F = 2 * k + 1;
    for (int64_t c = 0; c < C; c++) {
        for (int64_t s = 0; s < S; s++) {
            const int64_t cs = c * S + s;
            vf acc[KMAX][2 * KMAX + 1];
            for (int64_t j = 0; j < K0; j++)
                for (int64_t f = 0; f < F; f++) acc[j][f] = splat(0.0f);
            for (int64_t i0 = 0; i0 < B; i0 += V) {
                const int64_t nv = B - i0 < V ? B - i0 : V;
                vf zz[KMAX], part[KMAX];
                for (int64_t a = 0; a < k; a++) {
                    const float *p = z + (s * k + a) * B + i0;
                    zz[a] = nv == V ? load(p) : load_part(p, nv);
                }
                vf top = splat(-3.0e38f);
                for (int64_t j = 0; j < K0; j++) {
                    const int64_t cj = cs * K0 + j;
                    vf q = splat(0.0f);
                    for (int64_t a = 0; a < k; a++) {
                        vf d = zz[a] - m[cj * k + a];
                        q += d * d * iv[cj * k + a];
                    }
                    part[j] = cst[cj] - 0.5f * q;
                    top = vmax(top, part[j]);
                }
                vf total = splat(0.0f);
                for (int64_t j = 0; j < K0; j++) {
                    part[j] = exp_nonpositive(part[j] - top);
                    total += part[j];
                }
                vf lo = top + log_positive(total);
                for (int v = 0; v < nv; v++) out[cs * B + i0 + v] = lo[v];
                vf mask = splat(0.0f);
                for (int v = 0; v < nv; v++) mask[v] = 1.0f;
                vf r = mask / total;
                for (int64_t j = 0; j < K0; j++) {
                    vf g = part[j] * r;
                    for (int64_t a = 0; a < k; a++) {
                        vf gz = g * zz[a];
                        acc[j][a] += gz * zz[a];
                        acc[j][k + a] += gz;
                    }
                    acc[j][2 * k] += g;
                }
            }
            for (int64_t j = 0; j < K0; j++)
                for (int64_t f = 0; f < F; f++) stats[(cs * K0 + j) * F + f] = sum(acc[j][f]);
        }
    }
    return 0;
}

/* ---- the critic probe's pass: hidden layer, readout and mixture in one sweep ----------

   The pass of gelu_readout with G = C cells, Q = S positions (off = the query offsets),
   K = R = KC + k + 3 readout rows, and dL/dout from mixture_block in place of the
   residual, for L = scale * sum log mixture. With g_base non-NULL it writes g_base, g_off,
   g_w, g_bias (as gelu_readout) and dL/d cm, civ, cn, rot ([C, k, k]) and ld ([C]); with
   ll non-NULL the summed log mixture per cell, ll [C]; all overwritten. Returns 0, or -1
   for sizes out of range or without scratch memory. */
int critic_pass(int64_t C, int64_t S, int64_t H, int64_t B, int64_t KC, int64_t k,
                float floor_, float scale, const float *base, const float *off,
                const float *w, const float *bias, const float *cm, const float *civ,
                const float *cn, const float *y, const float *rot, const float *nul,
                const float *ld, float *g_base, float *g_off, float *g_w, float *g_bias,
                float *g_cm, float *g_civ, float *g_cn, float *g_rot, float *g_ld,
                float *ll) {
    const int64_t R = KC + k + 3, grad = g_base != NULL;
    if (KC < 1 || R > KMAX || k < 1) return -1;
    vf *acc = grad ? aligned_alloc(sizeof(vf), sizeof(vf) * (size_t)(C * (k * k + 1))) : NULL;
    vf *lanes = ll ? aligned_alloc(sizeof(vf), sizeof(vf) * (size_t)C) : NULL;
    float *loss = malloc(sizeof(float) * (size_t)C);
    if ((grad && acc == NULL) || (ll && lanes == NULL) || loss == NULL) {
        free(acc); free(lanes); free(loss);
        return -1;
    }
    for (int64_t j = 0; grad && j < C * (k * k + 1); j++) acc[j] = splat(0.0f);
    for (int64_t c = 0; ll && c < C; c++) lanes[c] = splat(0.0f);
    if (grad) {
        memset(g_cm, 0, sizeof(float) * (size_t)(C * KC * k * B));
        memset(g_civ, 0, sizeof(float) * (size_t)(C * KC * k * B));
        memset(g_cn, 0, sizeof(float) * (size_t)(C * KC * B));
    }
    Mixture mx = {S, KC, k, B, floor_, scale, cm, civ, cn, y, rot, nul, ld,
                  g_cm, g_civ, g_cn, acc, lanes};
    int status = readout_pass(C, S, H, B, R, 1, base, off, w, bias, NULL, 1.0f, (int)grad,
                              loss, g_base, g_off, g_w, g_bias, MODE_MIXTURE, NULL, &mx);
    for (int64_t c = 0; status == 0 && c < C; c++) {
        if (grad) {
            const vf *a = acc + c * (k * k + 1);
            for (int64_t j = 0; j < k * k; j++) g_rot[c * k * k + j] = sum(a[j]);
            g_ld[c] = sum(a[k * k]);
        }
        if (ll) ll[c] = sum(lanes[c]);
    }
    free(acc);
    free(lanes);
    free(loss);
    return status;
}
