/*
 * fdb5_peer: the FDB5 side of haar's write/read benchmarks, over FDB5's C API.
 *
 *   fdb5_peer write|read|list ROOT NFIELDS SIZE FLUSH_EVERY
 *
 * Key space, field i (0 <= i < NFIELDS):
 *   class=od,expver=0001,stream=oper,date=20261121,time=1200,domain=g,type=fc,
 *   levtype=pl,levelist=<i%100+1>,step=<i/100>,param=130
 * Payload: SIZE bytes, "GRIB" | u64 LE i | xorshift bytes | "7777" (see fdb5_common.h),
 * pre-generated before timing.
 *
 * write: empties ROOT/db, then times fdb_archive of every field (one handle, a
 *        fresh key per field) with fdb_flush every FLUSH_EVERY fields and at the
 *        end.  p50/p99 are over the flush intervals (archive x FLUSH_EVERY + flush).
 * read:  one handle (created after the data is flushed); per field a fresh request,
 *        fdb_retrieve, fdb_datareader_open/read/close into a buffer, verifying the
 *        length, "GRIB", the field index and "7777".  p50/p99 are per retrieve
 *        (request build to reader close).  "digest" is the FNV-1a 64 of every byte read,
 *        in field order, so two libraries' reads can be compared byte for byte.
 * list:  (FDB5 >= 5.11 API only) lists everything with fdb_list (depth 3) and prints one
 *        line per element on stdout: its key level by level (db|index|datum, each
 *        "k=v,k=v" in the order fdb_splitkey_next_metadata gives) and its length; the
 *        order of the lines is the library's.  Used to compare listings across libraries.
 *
 * Output: one JSON line on stdout (list: the lines above).  Errors: message on stderr, exit 1.
 */
#include "fdb5_common.h"
#include <fdb5/fdb5_version.h>

static void usage(void) {
    fprintf(stderr, "usage: %s write|read|list ROOT NFIELDS SIZE FLUSH_EVERY\n", g_prog);
    exit(1);
}

static void emit(const char *mode, long n, long size, long flush_every, double secs,
                 double *lat_us, size_t nlat, const char *extra) {
    double bytes = (double)n * (double)size;
    char p50[64] = "null", p99[64] = "null";
    if (nlat) {
        snprintf(p50, sizeof p50, "%.1f", percentile(lat_us, nlat, 0.50));
        snprintf(p99, sizeof p99, "%.1f", percentile(lat_us, nlat, 0.99));
    }
    fprintf(g_json_out,
            "{\"peer\":\"fdb5-c-api\",\"fdb5_version\":\"%s\",\"mode\":\"%s\",\"fields\":%ld,"
            "\"size\":%ld,\"flush_every\":%ld,\"seconds\":%.6f,\"gib_per_s\":%.4f,"
            "\"fields_per_s\":%.1f,\"p50_us\":%s,\"p99_us\":%s%s}\n",
            fdb5_version_string(), mode, n, size, flush_every, secs,
            bytes / secs / (1024.0 * 1024.0 * 1024.0), (double)n / secs, p50, p99,
            extra ? extra : "");
    if (fflush(g_json_out)) die("writing result: %s", strerror(errno));
}

static void do_write(long n, long size, long flush_every) {
    unsigned char *bufs[NBUF];
    for (int b = 0; b < NBUF; b++) {
        bufs[b] = malloc((size_t)size);
        if (!bufs[b]) die("out of memory (payload %ld bytes)", size);
        fill_payload(bufs[b], (size_t)size, (uint64_t)b + 1);
    }
    size_t nint = (size_t)((n + flush_every - 1) / flush_every);
    double *lat = calloc(nint ? nint : 1, sizeof *lat);
    if (!lat) die("out of memory");

    fdb_handle_t *fdb = NULL;
    FDB_CHECK(fdb_new_handle(&fdb));

    size_t k = 0;
    uint64_t t0 = now_ns(), ti = t0;
    for (long i = 0; i < n; i++) {
        unsigned char *buf = bufs[i % NBUF];
        stamp_payload(buf, (uint64_t)i);
        fdb_key_t *key = make_key(i);
        FDB_CHECK(fdb_archive(fdb, key, (const char *)buf, (size_t)size));
        FDB_CHECK(fdb_delete_key(key));
        if ((i + 1) % flush_every == 0 || i + 1 == n) {
            FDB_CHECK(fdb_flush(fdb));
            uint64_t t = now_ns();
            lat[k++] = (double)(t - ti) / 1e3;
            ti = t;
        }
    }
    uint64_t t1 = now_ns();
    FDB_CHECK(fdb_delete_handle(fdb));

    emit("write", n, size, flush_every, (double)(t1 - t0) / 1e9, lat, k,
         ",\"latency\":\"per_flush_interval\"");
    for (int b = 0; b < NBUF; b++) free(bufs[b]);
    free(lat);
}

static void do_read(long n, long size, long flush_every) {
    /* One extra page so an over-long field is detected rather than truncated. */
    size_t cap = (size_t)size + 4096;
    unsigned char *buf = malloc(cap);
    double *lat = calloc((size_t)n, sizeof *lat);
    if (!buf || !lat) die("out of memory");

    fdb_handle_t *fdb = NULL;
    FDB_CHECK(fdb_new_handle(&fdb));

    uint64_t digest = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    uint64_t untimed = 0;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t ts = now_ns();
        fdb_request_t *req = make_request(i);
        fdb_datareader_t *dr = NULL;
        FDB_CHECK(fdb_new_datareader(&dr));
        FDB_CHECK(fdb_retrieve(fdb, req, dr));
        long est = 0;
        FDB_CHECK(fdb_datareader_open(dr, &est));
        size_t got = 0;
        for (;;) {
            long r = 0;
            FDB_CHECK(fdb_datareader_read(dr, buf + got, (long)(cap - got), &r));
            if (r <= 0) break;
            got += (size_t)r;
            if (got == cap) break;
        }
        FDB_CHECK(fdb_datareader_close(dr));
        FDB_CHECK(fdb_delete_datareader(dr));
        FDB_CHECK(fdb_delete_request(req));
        lat[i] = (double)(now_ns() - ts) / 1e3;

        if (got != (size_t)size)
            die("field %ld (step=%ld levelist=%ld): retrieved %zu bytes, expected %ld%s", i,
                i / 100, i % 100 + 1, got, size,
                got == 0 ? " (FDB5 returns nothing, without error, for missing data: "
                           "was it written with the same ROOT/NFIELDS?)"
                         : "");
        if (memcmp(buf, "GRIB", 4) != 0)
            die("field %ld: payload does not start with GRIB", i);
        if (payload_index(buf) != (uint64_t)i)
            die("field %ld: got the payload of field %llu", i,
                (unsigned long long)payload_index(buf));
        if (memcmp(buf + size - 4, "7777", 4) != 0)
            die("field %ld: payload does not end with 7777", i);
        /* The digest is not part of the timing. */
        uint64_t td = now_ns();
        for (size_t b = 0; b < got; b++) digest = (digest ^ buf[b]) * 0x100000001b3ull;
        untimed += now_ns() - td;
    }
    uint64_t t1 = now_ns() - untimed;
    FDB_CHECK(fdb_delete_handle(fdb));

    char extra[128];
    snprintf(extra, sizeof extra, ",\"latency\":\"per_retrieve\",\"digest\":\"%016llx\"",
             (unsigned long long)digest);
    emit("read", n, size, flush_every, (double)(t1 - t0) / 1e9, lat, (size_t)n, extra);
    free(buf);
    free(lat);
}

static void do_list(void) {
#if fdb5_VERSION_MAJOR > 5 || (fdb5_VERSION_MAJOR == 5 && fdb5_VERSION_MINOR >= 11)
    fdb_handle_t *fdb = NULL;
    FDB_CHECK(fdb_new_handle(&fdb));
    fdb_request_t *req = NULL;
    FDB_CHECK(fdb_new_request(&req));
    const char *od[1] = {"od"};
    FDB_CHECK(fdb_request_add(req, "class", od, 1));
    fdb_listiterator_t *it = NULL;
    FDB_CHECK(fdb_list(fdb, req, &it, false, 3));
    fdb_split_key_t *sk = NULL;
    FDB_CHECK(fdb_new_splitkey(&sk));
    int rc;
    while ((rc = fdb_listiterator_next(it)) == FDB_SUCCESS) {
        const char *uri = NULL;
        size_t off = 0, len = 0;
        FDB_CHECK(fdb_listiterator_attrs(it, &uri, &off, &len));
        FDB_CHECK(fdb_listiterator_splitkey(it, sk));
        const char *k = NULL, *v = NULL;
        size_t level = 0, prev = 0;
        int first = 1;
        while ((rc = fdb_splitkey_next_metadata(sk, &k, &v, &level)) == FDB_SUCCESS) {
            if (level != prev) fputc('|', g_json_out);
            else if (!first) fputc(',', g_json_out);
            fprintf(g_json_out, "%s=%s", k, v);
            prev = level;
            first = 0;
        }
        if (rc != FDB_ITERATION_COMPLETE)
            die("fdb_splitkey_next_metadata failed (rc=%d): %s", rc, fdb_error_string(rc));
        fprintf(g_json_out, " %zu\n", len);
    }
    if (rc != FDB_ITERATION_COMPLETE)
        die("fdb_listiterator_next failed (rc=%d): %s", rc, fdb_error_string(rc));
    FDB_CHECK(fdb_delete_splitkey(sk));
    FDB_CHECK(fdb_delete_listiterator(it));
    FDB_CHECK(fdb_delete_request(req));
    FDB_CHECK(fdb_delete_handle(fdb));
    if (fflush(g_json_out)) die("writing result: %s", strerror(errno));
#else
    die("list needs the FDB5 5.11+ C API (fdb_list with an iterator out-parameter); this is %s",
        fdb5_VERSION_STR);
#endif
}

int main(int argc, char **argv) {
    g_prog = "fdb5_peer";
    if (argc != 6) usage();
    const char *mode = argv[1];
    int write = strcmp(mode, "write") == 0;
    int list = strcmp(mode, "list") == 0;
    if (!write && !list && strcmp(mode, "read") != 0) usage();
    long n = parse_long(argv[3], "NFIELDS", 1);
    long size = parse_long(argv[4], "SIZE", 16);
    long flush_every = parse_long(argv[5], "FLUSH_EVERY", 1);

    fdb_setup_root(argv[2], write);
    stdout_guard();
    FDB_CHECK(fdb_initialise());

    if (write)
        do_write(n, size, flush_every);
    else if (list)
        do_list();
    else
        do_read(n, size, flush_every);
    return 0;
}
