/* checkpoint.c: training state on disk.
 *
 * File "ckpt-%08lld.bin" (little-endian, as the machine writes it):
 *   "MXLMCKP1"  u32 version (2; 1 is read too)  u32 fingerprint length  fingerprint text
 *   i64 step, sample, tokens   f32 val_loss0   i64 tokens_to_target
 *   version 2 only: i64 skipped_nonfinite, skipped_spikes, spikes
 *                   i32 n_window (<= MX_SPIKE_WINDOW_MAX)  f32 window[n_window]
 *   u64 n_params   u64 n_linear_states
 *   f32 params[n_params]  f32 adam_m[n_params]  f32 adam_v[n_params]
 *   per linear: f32 amax_hist[3][2][4]  i32 amax_n[3][2]
 *   u32 crc32 (zlib) of every byte above   "MXLMEND1"
 * Written to a temporary file in the same folder ("ckpt-N.bin.tmp.PID", a
 * name mx_ckpt_latest never takes), fsync'ed, renamed, and the folder
 * fsync'ed: a reader sees the old file or the new one, never half.
 * Read in two passes (the checksum first, then the tensors straight into the
 * model), so a load needs no second copy of the state in memory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mxlm/trainer.h"
#include "mxlm/util.h"

static const char k_magic[8] = {'M', 'X', 'L', 'M', 'C', 'K', 'P', '1'};
static const char k_end[8] = {'M', 'X', 'L', 'M', 'E', 'N', 'D', '1'};

typedef struct { mx_outfile o; uLong crc; } wr;

static void put(wr* w, const void* p, size_t n) {
    const unsigned char* b = p;
    for (size_t done = 0; done < n && !w->o.err;) {
        size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
        w->crc = crc32(w->crc, b + done, (uInt)chunk);
        mx_out_write(&w->o, b + done, chunk);
        done += chunk;
    }
}

/* A failed checkpoint: the temporary removed, the reason, the previous checkpoint untouched. */
static int save_failed(wr* w, const char* path) {
    const int err = w->o.err;
    mx_out_abort(&w->o);
    return mx_fail(MX_EIO, "%s: cannot write checkpoint: %s (the previous checkpoint is kept)", path, strerror(err));
}

int mx_ckpt_save(const char* path, const mx_llama* mdl, const float* m, const float* v, const mx_ckpt_meta* meta,
                 const char* fingerprint) {
    wr w = {.crc = crc32(0L, Z_NULL, 0)};
    int rc = mx_out_open(&w.o, path);
    if (rc) return rc;
    mx_crash_point("ckpt-open", meta->step);
    uint32_t ver = 2, flen = (uint32_t)strlen(fingerprint);
    uint64_t np = mdl->n_params, nl = (uint64_t)mdl->cfg.n_layers * MX_LIN_PER_BLOCK;
    int32_t nw = meta->n_window < 0 ? 0 : meta->n_window > MX_SPIKE_WINDOW_MAX ? MX_SPIKE_WINDOW_MAX : meta->n_window;
    put(&w, k_magic, 8);
    put(&w, &ver, 4);
    put(&w, &flen, 4);
    put(&w, fingerprint, flen);
    put(&w, &meta->step, 8);
    put(&w, &meta->sample, 8);
    put(&w, &meta->tokens, 8);
    put(&w, &meta->val_loss0, 4);
    put(&w, &meta->tokens_to_target, 8);
    put(&w, &meta->skipped_nonfinite, 8);
    put(&w, &meta->skipped_spikes, 8);
    put(&w, &meta->spikes, 8);
    put(&w, &nw, 4);
    put(&w, meta->window, (size_t)nw * 4);
    put(&w, &np, 8);
    put(&w, &nl, 8);
    put(&w, mdl->params, np * 4);
    mx_crash_point("ckpt-mid", meta->step);
    put(&w, m, np * 4);
    put(&w, v, np * 4);
    for (uint64_t i = 0; i < nl; i++) {
        put(&w, mdl->lstate[i].amax_hist, sizeof mdl->lstate[i].amax_hist);
        put(&w, mdl->lstate[i].amax_n, sizeof mdl->lstate[i].amax_n);
    }
    uint32_t crc = (uint32_t)w.crc;
    put(&w, &crc, 4);
    put(&w, k_end, 8);
    if (w.o.err) return save_failed(&w, path);
    mx_crash_point("ckpt-written", meta->step);
    if (mx_out_sync(&w.o, "checkpoint")) return save_failed(&w, path);
    mx_crash_point("ckpt-synced", meta->step);
    if (mx_out_commit(&w.o, "checkpoint")) return save_failed(&w, path);
    mx_crash_point("ckpt-renamed", meta->step); /* the rename is durable: mx_out_commit fsync'ed the folder */
    return MX_OK;
}

/* Reads at increasing offsets of fd, never beyond `end`. */
typedef struct { int fd; uint64_t off, end; } rd;
static int take(rd* r, void* dst, size_t n) {
    if (r->end - r->off < n || mx_pread_all(r->fd, dst, n, r->off)) return -1;
    r->off += n;
    return 0;
}

/* The first line where a and b differ, into out. */
static void first_diff(const char* a, const char* b, char* out, size_t n) {
    while (*a || *b) {
        const char* ae = strchr(a, '\n');
        const char* be = strchr(b, '\n');
        size_t al = ae ? (size_t)(ae - a) : strlen(a), bl = be ? (size_t)(be - b) : strlen(b);
        if (al != bl || memcmp(a, b, al)) {
            snprintf(out, n, "checkpoint has '%.*s', this run has '%.*s'", (int)al, a, (int)bl, b);
            return;
        }
        a += al + (ae ? 1 : 0);
        b += bl + (be ? 1 : 0);
    }
    snprintf(out, n, "(no line differs)");
}

/* The id of a fingerprint's last line "run-id = HEX" (0: none), *line_at where that line starts (or the end). */
static uint64_t fp_run_id(const char* fp, size_t* line_at) {
    const char* k = "run-id = ";
    size_t n = strlen(fp);
    *line_at = n;
    if (n < 2) return 0;
    size_t s = n - 1; /* the start of the last line (fp ends in a newline) */
    while (s > 0 && fp[s - 1] != '\n') s--;
    if (strncmp(fp + s, k, strlen(k))) return 0;
    *line_at = s;
    return strtoull(fp + s + strlen(k), NULL, 16);
}

/* The file's fingerprint against the run's: first the run ids (another run's checkpoint), then the rest. */
static int fp_check(const char* path, const char* file_fp, const char* want, uint64_t* file_id) {
    size_t fa, wa;
    *file_id = fp_run_id(file_fp, &fa);
    const uint64_t want_id = fp_run_id(want, &wa);
    if (*file_id && *file_id != want_id)
        return mx_fail(MX_EINVAL, "%s belongs to another run (run id %016llx; this run's is %016llx): a run resumes "
                                  "only its own checkpoints. To start a new run from those weights: mxlm export --run "
                                  "THAT_RUN --hf DIR, then mxlm train --init-from DIR", path,
                       (unsigned long long)*file_id, (unsigned long long)want_id);
    if (fa == wa && !strncmp(file_fp, want, fa)) return MX_OK;
    char* a = strndup(file_fp, fa);
    char* b = strndup(want, wa);
    char why[600];
    if (a && b) first_diff(a, b, why, sizeof why);
    else snprintf(why, sizeof why, "(out of memory)");
    free(a);
    free(b);
    return mx_fail(MX_EFORMAT, "%s: checkpoint does not match this run's configuration: %s", path, why);
}

/* Both loads: fingerprint NULL skips its check (fp_out gets the file's); m, v
 * NULL skip the AdamW moments. */
static int ckpt_read(const char* path, mx_llama* mdl, float* m, float* v, mx_ckpt_meta* meta, const char* fingerprint,
                     char* fp_out, size_t fp_n) {
    int fd = mx_open_input(path, "checkpoint");
    if (fd < 0) return MX_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return mx_fail(MX_EIO, "%s: cannot stat", path); }
    uint64_t n = (uint64_t)st.st_size;
    int rc = MX_OK;
    char* fp = NULL;
    unsigned char* chunk = NULL;
    unsigned char head[8], tail[12];
    if (n < 8 + 8 + 4 + 4 || mx_pread_all(fd, head, 8, 0) || memcmp(head, k_magic, 8)) {
        rc = mx_fail(MX_EFORMAT, "%s: not an mxlm checkpoint (bad magic or too short)", path);
        goto out;
    }
    if (mx_pread_all(fd, tail, 12, n - 12) || memcmp(tail + 4, k_end, 8)) {
        rc = mx_fail(MX_EFORMAT, "%s: checkpoint is truncated or corrupt (no end marker)", path);
        goto out;
    }
    /* pass 1: the checksum of everything before it */
    const size_t CH = 1u << 20;
    chunk = malloc(CH);
    if (!chunk) { rc = mx_fail(MX_ENOMEM, "%s: out of memory reading the checkpoint", path); goto out; }
    uLong c = crc32(0L, Z_NULL, 0);
    for (uint64_t off = 0; off < n - 12;) {
        size_t k = n - 12 - off < CH ? (size_t)(n - 12 - off) : CH;
        if (mx_pread_all(fd, chunk, k, off)) { rc = mx_fail(MX_EIO, "%s: read error", path); goto out; }
        c = crc32(c, chunk, (uInt)k);
        off += k;
    }
    uint32_t crc_file, crc = (uint32_t)c;
    memcpy(&crc_file, tail, 4);
    if (crc != crc_file) {
        rc = mx_fail(MX_EFORMAT, "%s: checkpoint checksum mismatch (crc32 %08x, stored %08x): the file is corrupt", path,
                     crc, crc_file);
        goto out;
    }
    /* pass 2: the header, then the tensors */
    rd r = {fd, 8, n - 12};
    uint32_t ver, flen;
    if (take(&r, &ver, 4) || (ver != 1 && ver != 2) || take(&r, &flen, 4) || flen > r.end - r.off) {
        rc = mx_fail(MX_EFORMAT, "%s: unsupported checkpoint version or bad header", path);
        goto out;
    }
    fp = malloc((size_t)flen + 1);
    if (!fp) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto out; }
    if (take(&r, fp, flen)) { rc = mx_fail(MX_EIO, "%s: read error", path); goto out; }
    fp[flen] = 0;
    if (fp_out && fp_n) snprintf(fp_out, fp_n, "%s", fp);
    mx_ckpt_meta mt;
    memset(&mt, 0, sizeof mt);
    size_t at;
    mt.run_id = fp_run_id(fp, &at);
    if (fingerprint && (strlen(fp) != flen || (rc = fp_check(path, fp, fingerprint, &mt.run_id)))) {
        if (!rc) rc = mx_fail(MX_EFORMAT, "%s: checkpoint fingerprint holds a NUL byte", path);
        goto out;
    }
    uint64_t np, nl;
    int bad = take(&r, &mt.step, 8) || take(&r, &mt.sample, 8) || take(&r, &mt.tokens, 8) ||
              take(&r, &mt.val_loss0, 4) || take(&r, &mt.tokens_to_target, 8);
    if (!bad && ver >= 2) {
        bad = take(&r, &mt.skipped_nonfinite, 8) || take(&r, &mt.skipped_spikes, 8) || take(&r, &mt.spikes, 8) ||
              take(&r, &mt.n_window, 4) || mt.n_window < 0 || mt.n_window > MX_SPIKE_WINDOW_MAX ||
              take(&r, mt.window, (size_t)mt.n_window * 4);
    }
    if (bad || take(&r, &np, 8) || take(&r, &nl, 8)) {
        rc = mx_fail(MX_EFORMAT, "%s: checkpoint header truncated or invalid", path);
        goto out;
    }
    uint64_t want_nl = (uint64_t)mdl->cfg.n_layers * MX_LIN_PER_BLOCK;
    size_t ls = sizeof mdl->lstate[0].amax_hist + sizeof mdl->lstate[0].amax_n;
    if (np != mdl->n_params || nl != want_nl || r.end - r.off != np * 12 + nl * ls) {
        rc = mx_fail(MX_EFORMAT, "%s: checkpoint holds %llu parameters, the model has %zu", path,
                     (unsigned long long)np, mdl->n_params);
        goto out;
    }
    /* all checks passed: now modify */
    int e = take(&r, mdl->params, np * 4);
    if (!e && m && v) e = take(&r, m, np * 4) || take(&r, v, np * 4);
    else if (!e) r.off += np * 8; /* the moments, skipped (their size was checked above) */
    for (uint64_t i = 0; i < nl && !e; i++)
        e = take(&r, mdl->lstate[i].amax_hist, sizeof mdl->lstate[i].amax_hist) ||
            take(&r, mdl->lstate[i].amax_n, sizeof mdl->lstate[i].amax_n);
    if (e) { rc = mx_fail(MX_EIO, "%s: read error", path); goto out; }
    if (meta) *meta = mt;
out:
    free(chunk);
    free(fp);
    close(fd);
    return rc;
}

int mx_ckpt_load(const char* path, mx_llama* mdl, float* m, float* v, mx_ckpt_meta* meta, const char* fingerprint) {
    return ckpt_read(path, mdl, m, v, meta, fingerprint, NULL, 0);
}

int mx_ckpt_load_params(const char* path, mx_llama* mdl, mx_ckpt_meta* meta, char* fingerprint, size_t n) {
    return ckpt_read(path, mdl, NULL, NULL, meta, NULL, fingerprint, n);
}

int mx_ckpt_latest(const char* dir, char* path, size_t n) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    long long best = -1;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5)) continue;
        char* end = NULL;
        long long s = strtoll(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || strcmp(end, ".bin")) continue; /* skips temporaries */
        if (s > best) best = s;
    }
    closedir(d);
    if (best < 0) return 0;
    if (mx_pathf(path, n, "%s/ckpt-%08lld.bin", dir, best)) return 0;
    return 1;
}
