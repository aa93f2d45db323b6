/*
 * test_fp8.cu: mx/fp8.cu (amax, FP8 per-tensor quantize, given scales) against src/mx/fp8.c
 * (run program).
 */
#include "test.cuh"

/* ---- FP8 per-tensor ---- */
void test_fp8(const char* filter) {
    if (!wanted("fp8", "fp8")) return;
    for (int c = 0; c < 8; c++) {
        g_fail_case = 0;
        int rows = 96 + 32 * c, cols = 160 + 8 * c;  // n not a multiple of 4 sometimes
        size_t n = (size_t)rows * cols + (c & 1) * 3;
        std::vector<float> x(n);
        for (auto& v : x) v = (float)(rndn() * ldexp(1.0, (int)(rndu() * 30) - 15));
        if (c == 5) x[n / 2] = NAN;
        int bf = c & 2;
        std::vector<uint16_t> xb(n);
        if (bf) for (size_t i = 0; i < n; i++) { xb[i] = mx_bf16_from_f32(x[i]); x[i] = mx_bf16_to_f32(xb[i]); }
        mx_fp8_kind kind = (c & 4) ? MX_FP8_E5M2 : MX_FP8_E4M3;
        void* dx = bf ? (void*)dalloc<uint16_t>(n) : (void*)dalloc<float>(n);
        CK(cudaMemcpy(dx, bf ? (const void*)xb.data() : (const void*)x.data(), n * (bf ? 2 : 4), cudaMemcpyHostToDevice));
        float* dv = dalloc<float>(4);
        uint8_t* dc = dalloc<uint8_t>(n);
        /* the inverse scale over a row vector too (odd lengths, more than the scale kernel's threads; one
         * float past it must stay) */
        const size_t nr = 97 + 211 * (size_t)c;
        float* drow = dalloc<float>(nr + 1);
        CK(cudaMemset(drow, 0xA5, (nr + 1) * 4));
        CK(cudaMemset(dc, 0xA5, n));
        MX(mxg_fp8_quantize(dx, bf ? MXG_BF16 : MXG_F32, n, kind, NULL, dv, dv + 1, dv + 2, drow, nr, dc, NULL));
        CK(cudaDeviceSynchronize());
        auto hv = d2h(dv, 3);
        {
            auto hr = d2h(drow, nr + 1);
            size_t bad = 0;
            for (size_t j = 0; j < nr; j++) bad += memcmp(&hr[j], &hv[2], 4) != 0;
            uint32_t past;
            memcpy(&past, &hr[nr], 4);
            if (bad) fail("fp8[%d]: %zu of %zu row scales differ from the inverse scale", c, bad, nr);
            if (past != 0xA5A5A5A5u) fail("fp8[%d]: the row scales written past their %zu", c, nr);
        }
        auto hc = d2h(dc, n);
        float amax = mx_amax(x.data(), n), scale = mx_fp8_scale_for_amax(amax, kind);
        std::vector<uint8_t> rc(n);
        mx_fp8_quantize(x.data(), n, scale, kind, rc.data());
        if (!(hv[0] == amax || (hv[0] != hv[0] && amax != amax))) fail("fp8[%d]: amax %g, CPU %g", c, hv[0], amax);
        if (hv[1] != scale) fail("fp8[%d]: scale %g, CPU %g", c, hv[1], scale);
        if (hv[2] != 1.0f / scale) fail("fp8[%d]: inverse scale %g", c, hv[2]);
        int i = first_diff(hc.data(), rc.data(), n);
        if (i >= 0) fail("fp8[%d] %s: code %d = 0x%02x, CPU 0x%02x", c, kind ? "e5m2" : "e4m3", i, hc[i], rc[i]);
        /* delayed scaling: a given scale */
        float given = 3.0f;
        CK(cudaMemcpy(dv + 3, &given, 4, cudaMemcpyHostToDevice));
        MX(mxg_fp8_quantize(dx, bf ? MXG_BF16 : MXG_F32, n, kind, dv + 3, dv, NULL, NULL, NULL, 0, dc, NULL));
        CK(cudaDeviceSynchronize());
        hc = d2h(dc, n);
        mx_fp8_quantize(x.data(), n, given, kind, rc.data());
        i = first_diff(hc.data(), rc.data(), n);
        if (i >= 0) fail("fp8[%d] given scale: code %d = 0x%02x, CPU 0x%02x", c, i, hc[i], rc[i]);
        /* written transposed (mxg_fp8_quantize_t): x's first rr x cc values as a matrix, the CPU's codes
         * transposed; amax and scale over those values. Shape 0: odd sizes (partial tiles and unaligned rows:
         * k_fp8_cast_t but where c % 3 == 0 and c % 4 == 0); shape 1: rows % 4 == 0 and cols % 16 == 0, the warp-tile
         * kernel (k_fp8_cast_tw) over partial CTA tiles (rows 96 .. 320, cols 160 .. 208) */
        for (int sh = 0; sh < 2; sh++) {
            const int rr = sh ? rows & ~3 : rows - c % 3, cc = sh ? cols & ~15 : cols - c % 4;
            const size_t m = (size_t)rr * cc;
            const float am = mx_amax(x.data(), m), sc = mx_fp8_scale_for_amax(am, kind);
            std::vector<uint8_t> want(m), flat(m);
            mx_fp8_quantize(x.data(), m, sc, kind, flat.data());
            for (int r = 0; r < rr; r++)
                for (int q = 0; q < cc; q++) want[(size_t)q * rr + r] = flat[(size_t)r * cc + q];
            CK(cudaMemset(dc, 0xA5, n));
            CK(cudaMemset(drow, 0xA5, (nr + 1) * 4));
            MX(mxg_fp8_quantize_t(dx, bf ? MXG_BF16 : MXG_F32, rr, cc, kind, NULL, dv, dv + 1, dv + 2, drow, 3, NULL, dc,
                                  NULL));
            CK(cudaDeviceSynchronize());
            hv = d2h(dv, 3);
            hc = d2h(dc, n);
            if (!(hv[0] == am || (hv[0] != hv[0] && am != am))) fail("fp8_t[%d]: amax %g, CPU %g", c, hv[0], am);
            if (hv[1] != sc) fail("fp8_t[%d]: scale %g, CPU %g", c, hv[1], sc);
            auto hr = d2h(drow, 4);
            if (hr[0] != 1.0f / sc || hr[2] != 1.0f / sc) fail("fp8_t[%d]: row scale %g, want %g", c, hr[0], 1.0f / sc);
            uint32_t past;
            memcpy(&past, &hr[3], 4);
            if (past != 0xA5A5A5A5u) fail("fp8_t[%d]: the row scales written past their 3", c);
            i = first_diff(hc.data(), want.data(), m);
            if (i >= 0) fail("fp8_t[%d] %d x %d: code %d = 0x%02x, CPU 0x%02x", c, rr, cc, i, hc[i], want[i]);
            for (size_t j = m; j < n; j++)
                if (hc[j] != 0xA5) { fail("fp8_t[%d]: byte %zu written past the output", c, j); break; }
            /* the cast alone from the amax just written (mxg_fp8_quantize_t_amax, an FP8 Wgrad's X^T from its
             * Fprop's amax): the same codes, scale and row scales */
            CK(cudaMemset(dc, 0xA5, n));
            CK(cudaMemset(drow, 0xA5, (nr + 1) * 4));
            CK(cudaMemset(dv + 1, 0xA5, 8));
            MX(mxg_fp8_quantize_t_amax(dx, bf ? MXG_BF16 : MXG_F32, rr, cc, kind, dv, NULL, dv + 1, dv + 2, drow, 3, NULL,
                                       dc, NULL));
            CK(cudaDeviceSynchronize());
            hv = d2h(dv, 3);
            hc = d2h(dc, n);
            hr = d2h(drow, 4);
            if (hv[1] != sc || hv[2] != 1.0f / sc) fail("fp8_t amax[%d]: scale %g / %g, want %g", c, hv[1], hv[2], sc);
            if (hr[0] != 1.0f / sc || hr[2] != 1.0f / sc) fail("fp8_t amax[%d]: row scale %g", c, hr[0]);
            i = first_diff(hc.data(), want.data(), m);
            if (i >= 0) fail("fp8_t amax[%d] %d x %d: code %d = 0x%02x, CPU 0x%02x", c, rr, cc, i, hc[i], want[i]);
            /* both layouts in one pass (codes as stored and transposed: an FP8 Dgrad's dY for the Wgrad after it, a
             * weight's Fprop and Dgrad operands), from a given amax and with the amax computed; the amax copied out */
            uint8_t* dr = dalloc<uint8_t>(m + 64);
            for (int given_amax = 0; given_amax < 2; given_amax++) {
                CK(cudaMemset(dc, 0xA5, n));
                CK(cudaMemset(dr, 0xA5, m + 64));
                CK(cudaMemset(dv + 3, 0xA5, 4));
                if (given_amax)
                    MX(mxg_fp8_quantize_t_amax(dx, bf ? MXG_BF16 : MXG_F32, rr, cc, kind, dv, dv + 3, dv + 1, dv + 2,
                                               drow, 3, dr, dc, NULL));
                else
                    MX(mxg_fp8_quantize_t(dx, bf ? MXG_BF16 : MXG_F32, rr, cc, kind, NULL, dv + 3, dv + 1, dv + 2, drow, 3,
                                          dr, dc, NULL));
                CK(cudaDeviceSynchronize());
                hv = d2h(dv, 4);
                hc = d2h(dc, n);
                auto hrow = d2h(dr, m + 64);
                if (!(hv[3] == am || (hv[3] != hv[3] && am != am)))
                    fail("fp8_t both[%d] %s: amax out %g, CPU %g", c, given_amax ? "given" : "made", hv[3], am);
                if (hv[1] != sc) fail("fp8_t both[%d]: scale %g, want %g", c, hv[1], sc);
                i = first_diff(hc.data(), want.data(), m);
                if (i >= 0) fail("fp8_t both[%d] %d x %d: transposed code %d = 0x%02x, CPU 0x%02x", c, rr, cc, i, hc[i], want[i]);
                i = first_diff(hrow.data(), flat.data(), m);
                if (i >= 0) fail("fp8_t both[%d] %d x %d: code %d = 0x%02x, CPU 0x%02x", c, rr, cc, i, hrow[i], flat[i]);
                for (size_t j = m; j < m + 64; j++)
                    if (hrow[j] != 0xA5) { fail("fp8_t both[%d]: byte %zu written past the output", c, j); break; }
            }
            CK(cudaFree(dr));
        }
        /* mxg_fp8_transpose of the codes just made (the first rr x cc bytes as a matrix, from offset c % 2:
         * unaligned rows where cc % 4 != 0 or the offset is odd), against the host's transpose */
        {
            const int rr = rows - c % 3, cc = cols - c % 4, off = c % 2;
            const size_t m = (size_t)rr * cc;
            auto src = d2h(dc, n);
            uint8_t* dt = dalloc<uint8_t>(m + 64);
            CK(cudaMemset(dt, 0xA5, m + 64));
            MX(mxg_fp8_transpose(dc + off, rr, cc, dt, NULL));
            CK(cudaDeviceSynchronize());
            auto ht = d2h(dt, m + 64);
            std::vector<uint8_t> want(m);
            for (int r = 0; r < rr; r++)
                for (int q = 0; q < cc; q++) want[(size_t)q * rr + r] = src[off + (size_t)r * cc + q];
            i = first_diff(ht.data(), want.data(), m);
            if (i >= 0) fail("fp8 transpose[%d] %d x %d: byte %d = 0x%02x, want 0x%02x", c, rr, cc, i, ht[i], want[i]);
            for (size_t j = m; j < m + 64; j++)
                if (ht[j] != 0xA5) { fail("fp8 transpose[%d]: byte %zu written past the output", c, j); break; }
            CK(cudaFree(dt));
        }
        CK(cudaFree(dx)); CK(cudaFree(dv)); CK(cudaFree(dc)); CK(cudaFree(drow));
        if (g_fail_case) g_fail++; else g_pass++;
    }
    printf("  fp8 per-tensor cases: 8 (each also transposed, in both layouts at once, and its codes by mxg_fp8_transpose)\n");
}
