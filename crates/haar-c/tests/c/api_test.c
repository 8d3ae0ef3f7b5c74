/* libhaar through its C header only: round trips and bad input against one store.
 *
 * usage: api_test CONFIG.yaml GRIB_FILE... [--lent] [--remote]
 *   CONFIG.yaml  the store (local posix/pmem, or remote) to test, empty at start
 *   GRIB_FILE    GRIB messages archived with haar_archive_grib (their keys checked below)
 *   --lent       the store lends bytes (pmem): a one-field view must be zero-copy
 *   --remote     the store is a server (keys are checked by its schema at the flush)
 *
 * Every check prints what failed and exits 1; a crash is a failure of the Rust harness. */
#define _POSIX_C_SOURCE 200809L
#include "haar.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (last error: %s)\n", haar_last_error());                    \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

/* Calls that must succeed: abort the program on failure (the rest depends on them). */
#define OK(call)                                                                          \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != HAAR_OK) {                                                             \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, rc_, \
                    haar_last_error());                                                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* A failing call: its code must be `code` and the message must contain `needle`. */
#define FAILS(call, code, needle)                                                         \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        CHECK(rc_ == (code), "%s returned %d, expected %d", #call, rc_, (code));          \
        CHECK(strstr(haar_last_error(), (needle)) != NULL, "%s: message lacks \"%s\"",    \
              #call, (needle));                                                           \
    } while (0)

static const char *BASE =
    "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc";

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static char *slurp(const char *path) {
    size_t n;
    char *b = read_file(path, &n);
    b = realloc(b, n + 1);
    b[n] = 0;
    return b;
}

/* The field of step `step`, param `param`: 1000 bytes of a pattern. */
static void fill(unsigned char *buf, size_t n, int step, int param) {
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7 + step * 13 + param);
}

static size_t count_list(haar_t *h, const char *req) {
    haar_list_t *it = NULL;
    OK(haar_list(h, req, &it));
    size_t n = 0, total = 0;
    while (haar_list_next(it) == HAAR_OK) n++;
    OK(haar_list_count(it, &total));
    CHECK(n == total, "list iterated %zu of %zu", n, total);
    OK(haar_list_free(it));
    return n;
}

/* ---- wait and watch ---- */
struct waiter {
    haar_t *h;
    const char *req;
    int rc;
    size_t fields;
};

static void *wait_thread(void *arg) {
    struct waiter *w = arg;
    w->rc = haar_wait(w->h, w->req, 20.0, &w->fields);
    return NULL;
}

struct watched {
    int calls;
    int stop_after;
    char last_key[512];
};

static int on_field(void *ctx, const char *key, uint64_t length, const char *origin) {
    struct watched *w = ctx;
    (void)origin;
    w->calls++;
    snprintf(w->last_key, sizeof w->last_key, "%s", key);
    if (length != 1000) fprintf(stderr, "watch: %s has length %llu\n", key, (unsigned long long)length);
    return w->calls >= w->stop_after;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CONFIG.yaml GRIB_FILE... [--lent]\n", argv[0]);
        return 2;
    }
    const char *config = argv[1];
    int expect_lent = 0, remote = 0;
    const char *gribs[8];
    int ngribs = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lent") == 0) expect_lent = 1;
        else if (strcmp(argv[i], "--remote") == 0) remote = 1;
        else if (ngribs < 8) gribs[ngribs++] = argv[i];
    }
    CHECK(strlen(haar_version()) > 0, "version");

    /* ---- open: a file and the same YAML as text ---- */
    haar_t *h = NULL;
    OK(haar_open(config, &h));
    char *yaml = slurp(config);
    haar_t *h2 = NULL;
    OK(haar_open_yaml(yaml, &h2));

    /* ---- archive key + bytes: 2 steps x 2 params, a haar_key_t reused ---- */
    unsigned char data[1000], back[1000];
    haar_key_t *key = NULL;
    OK(haar_key_new(&key));
    {
        char copy[256];
        snprintf(copy, sizeof copy, "%s", BASE);
        for (char *kv = strtok(copy, ","); kv; kv = strtok(NULL, ",")) {
            char *eq = strchr(kv, '=');
            *eq = 0;
            OK(haar_key_add(key, kv, eq + 1));
        }
    }
    for (int step = 0; step < 2; step++) {
        for (int p = 0; p < 2; p++) {
            char s[16], par[16];
            snprintf(s, sizeof s, "%d", step);
            snprintf(par, sizeof par, "%d", p == 0 ? 167 : 165);
            OK(haar_key_add(key, "step", s));
            OK(haar_key_add(key, "param", par));
            fill(data, sizeof data, step, p);
            OK(haar_archive(h, key, data, sizeof data));
        }
    }
    /* The string form of the key. */
    char k3[256];
    snprintf(k3, sizeof k3, "%s,step=3,param=167", BASE);
    fill(data, sizeof data, 3, 0);
    OK(haar_archive_str(h, k3, data, sizeof data));
    CHECK(count_list(h, "class=od,expver=1,date=20261121") == 0, "fields are invisible before the flush");
    OK(haar_flush(h));
    CHECK(count_list(h, "class=od,expver=1,date=20261121") == 5, "5 fields after the flush");
    CHECK(count_list(h2, "class=od,expver=1,date=20261121,step=0/1") == 4, "4 through the second handle");

    /* ---- archive GRIB, keyed by ecCodes ---- */
    size_t grib_fields_expected = 0;
    for (int i = 0; i < ngribs; i++) {
        size_t len, fields = 99;
        char *g = read_file(gribs[i], &len);
        OK(haar_archive_grib(h, g, len, &fields));
        CHECK(fields >= 1, "%s: %zu fields", gribs[i], fields);
        grib_fields_expected += fields;
        free(g);
    }
    OK(haar_flush(h));
    if (ngribs > 0) {
        /* gg_sfc_grib2.tmpl: od/oper/an 2007-04-24 12 UTC, sfc, param 130 (ecCodes 2.28). */
        haar_list_t *it = NULL;
        OK(haar_list(h, "date=20070424", &it));
        CHECK(haar_list_next(it) == HAAR_OK, "the GRIB2 sample is listed");
        const char *ks = NULL;
        OK(haar_list_key(it, &ks));
        CHECK(strstr(ks, "param=130") && strstr(ks, "levtype=sfc") && strstr(ks, "time=1200") &&
                  strstr(ks, "class=od") && strstr(ks, "type=an"),
              "GRIB2 sample key %s", ks);
        CHECK(haar_list_next(it) == HAAR_END, "one field on that date");
        OK(haar_list_free(it));
        /* Its bytes come back identical. */
        size_t len;
        char *g = read_file(gribs[0], &len);
        haar_reader_t *r = NULL;
        char req[600];
        snprintf(req, sizeof req, "date=20070424");
        OK(haar_retrieve(h, req, &r));
        uint64_t size = 0;
        OK(haar_reader_size(r, &size));
        char *gb = malloc(len);
        size_t n = 0;
        OK(haar_reader_read(r, gb, len, &n));
        CHECK(size == len && n == len && memcmp(g, gb, len) == 0, "GRIB round trip (%zu bytes)", len);
        OK(haar_reader_free(r));
        free(gb);

        /* One message at a time, its complete key handed back (FDB5's store plugin). */
        char key[1024];
        size_t key_len = 0;
        FAILS(haar_archive_grib_message(h, g, len, key, 8, &key_len), HAAR_ERR_INPUT, "nothing archived");
        CHECK(key_len > 8, "the size needed is given: %zu", key_len);
        OK(haar_archive_grib_message(h, g, len, key, sizeof key, &key_len));
        CHECK(key_len == strlen(key) && strstr(key, "param=130") && strstr(key, "date=20070424"),
              "the key handed back: %s", key);
        char *two = malloc(2 * len);
        memcpy(two, g, len);
        memcpy(two + len, g, len);
        FAILS(haar_archive_grib_message(h, two, 2 * len, key, sizeof key, NULL), HAAR_ERR_INPUT,
              "more than one message");
        FAILS(haar_archive_grib_message(h, "GRIB not really", 15, key, sizeof key, NULL), HAAR_ERR_INPUT,
              "GRIB message");
        free(two);
        OK(haar_flush(h));
        /* The same key archived again masks the first copy: exactly one to purge, so the
         * purge checks further down count only their own fields. */
        haar_purge_report_t gpr;
        OK(haar_purge(h, "date=20070424", 1, &gpr));
        CHECK(gpr.dropped_fields == 1, "the masked GRIB copy is purged: %llu",
              (unsigned long long)gpr.dropped_fields);
        free(g);
    }

    /* ---- list: pairs and location ---- */
    {
        haar_list_t *it = NULL;
        OK(haar_list(h, "class=od,expver=1,step=1,param=165", &it));
        CHECK(haar_list_next(it) == HAAR_OK, "one field");
        size_t npairs = 0;
        OK(haar_list_key_count(it, &npairs));
        int seen_param = 0;
        for (size_t i = 0; i < npairs; i++) {
            const char *kw, *v;
            OK(haar_list_key_at(it, i, &kw, &v));
            if (strcmp(kw, "param") == 0) seen_param = strcmp(v, "165") == 0;
        }
        CHECK(npairs >= 10 && seen_param, "%zu pairs, param=165 among them", npairs);
        const char *db = NULL;
        uint64_t object = 0, offset = 0, length = 0;
        OK(haar_list_location(it, &db, &object, &offset, &length));
        CHECK(length == 1000 && strstr(db, "class=od") && strstr(db, "date=20261121"),
              "location %s %llu", db, (unsigned long long)length);
        const char *kw, *v;
        FAILS(haar_list_key_at(it, 99, &kw, &v), HAAR_ERR_INPUT, "pair 99");
        CHECK(haar_list_next(it) == HAAR_END, "then the end");
        FAILS(haar_list_key(it, &kw), HAAR_ERR_INPUT, "haar_list_next");
        OK(haar_list_free(it));
    }

    /* ---- retrieve: read, seek, tell, size, view ---- */
    {
        char req[300];
        snprintf(req, sizeof req, "%s,step=1,param=165", BASE);
        haar_reader_t *r = NULL;
        OK(haar_retrieve(h, req, &r));
        uint64_t size = 0, pos = 1;
        OK(haar_reader_size(r, &size));
        CHECK(size == 1000, "size %llu", (unsigned long long)size);
        OK(haar_reader_tell(r, &pos));
        CHECK(pos == 0, "starts at 0");
        size_t n = 0;
        OK(haar_reader_read(r, back, 600, &n));
        CHECK(n == 600, "read 600");
        OK(haar_reader_read(r, back + 600, 1000, &n));
        CHECK(n == 400, "the rest is 400, got %zu", n);
        fill(data, sizeof data, 1, 1);
        CHECK(memcmp(back, data, 1000) == 0, "bytes round trip");
        OK(haar_reader_read(r, back, 10, &n));
        CHECK(n == 0, "0 at the end");
        OK(haar_reader_seek(r, 500));
        OK(haar_reader_tell(r, &pos));
        CHECK(pos == 500, "tell after seek");
        OK(haar_reader_read(r, back, 10, &n));
        CHECK(n == 10 && memcmp(back, data + 500, 10) == 0, "read after seek");
        FAILS(haar_reader_seek(r, 1001), HAAR_ERR_INPUT, "beyond the end");
        const void *view = NULL;
        size_t vlen = 0;
        int lent = -1;
        OK(haar_reader_view(r, &view, &vlen, &lent));
        CHECK(vlen == 1000 && memcmp(view, data, 1000) == 0, "view");
        CHECK(lent == expect_lent, "lent=%d, expected %d", lent, expect_lent);
        OK(haar_reader_free(r));

        /* Two fields: concatenated in request order, copied. */
        snprintf(req, sizeof req, "%s,step=0,param=165/167", BASE);
        OK(haar_retrieve(h, req, &r));
        OK(haar_reader_size(r, &size));
        CHECK(size == 2000, "two fields");
        OK(haar_reader_view(r, &view, &vlen, &lent));
        fill(data, sizeof data, 0, 1);
        CHECK(lent == 0 && memcmp(view, data, 1000) == 0, "165 first");
        OK(haar_reader_free(r));
    }

    /* ---- axes ---- */
    {
        haar_axes_t *ax = NULL;
        OK(haar_axes(h, "class=od,expver=1,date=20261121", &ax));
        size_t nk = 0;
        OK(haar_axes_count(ax, &nk));
        int found_step = 0;
        for (size_t i = 0; i < nk; i++) {
            const char *kw;
            size_t nv = 0;
            OK(haar_axes_keyword(ax, i, &kw, &nv));
            if (strcmp(kw, "step") == 0) {
                found_step = 1;
                CHECK(nv == 3, "3 steps, got %zu", nv);
                const char *v0, *v2;
                OK(haar_axes_value(ax, i, 0, &v0));
                OK(haar_axes_value(ax, i, 2, &v2));
                CHECK(strcmp(v0, "0") == 0 && strcmp(v2, "3") == 0, "steps %s..%s", v0, v2);
                const char *bad;
                FAILS(haar_axes_value(ax, i, 3, &bad), HAAR_ERR_INPUT, "value 3");
            }
        }
        CHECK(found_step, "step is an axis");
        OK(haar_axes_free(ax));
    }

    /* ---- wait: satisfied by a flush from another handle; and timing out ---- */
    {
        char req[300];
        snprintf(req, sizeof req, "%s,step=6,param=167/165", BASE);
        struct waiter w = {h2, req, -1, 0};
        pthread_t t;
        pthread_create(&t, NULL, wait_thread, &w);
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        for (int p = 0; p < 2; p++) {
            char k[300];
            snprintf(k, sizeof k, "%s,step=6,param=%d", BASE, p ? 165 : 167);
            fill(data, sizeof data, 6, p);
            OK(haar_archive_str(h, k, data, sizeof data));
        }
        OK(haar_flush(h));
        pthread_join(t, NULL);
        CHECK(w.rc == HAAR_OK && w.fields == 2, "wait: rc %d, %zu fields", w.rc, w.fields);

        snprintf(req, sizeof req, "%s,step=9,param=167", BASE);
        size_t fields = 7;
        double t0 = now();
        FAILS(haar_wait(h, req, 0.3, &fields), HAAR_ERR_TIMEOUT, "step=9");
        CHECK(now() - t0 >= 0.25 && now() - t0 < 10.0, "waited %.2f s", now() - t0);
        CHECK(fields == 0, "no fields on timeout");
        FAILS(haar_wait(h, req, -1.0, NULL), HAAR_ERR_INPUT, "timeout_s");
    }

    /* ---- watch: a callback per flushed field, stopped by the callback or the deadline ---- */
    {
        struct watched w = {0, 3, ""};
        size_t events = 0;
        int rc = haar_watch(h, "class=od,expver=1,date=20261121,param=167", on_field, &w, 20.0, &events);
        CHECK(rc == HAAR_OK && w.calls == 3 && events == 3, "watch stopped by the callback: rc %d, %d calls",
              rc, w.calls);
        CHECK(strstr(w.last_key, "param=167") != NULL, "watched key %s", w.last_key);
        struct watched all = {0, 1000, ""};
        rc = haar_watch(h, "class=od,expver=1,date=20261121,param=165", on_field, &all, 0.5, &events);
        CHECK(rc == HAAR_END && all.calls == 3, "watch to the deadline: rc %d, %d calls", rc, all.calls);
        FAILS(haar_watch(h, "param=165", NULL, NULL, 1.0, NULL), HAAR_ERR_INPUT, "callback");
    }

    /* ---- bad input: a clear code and message each, never a crash ---- */
    {
        haar_t *none = NULL;
        FAILS(haar_flush(NULL), HAAR_ERR_INPUT, "NULL");
        FAILS(haar_archive_str(NULL, k3, data, 10), HAAR_ERR_INPUT, "NULL");
        FAILS(haar_list(NULL, NULL, NULL), HAAR_ERR_INPUT, "NULL");
        if (remote) {
            /* One server checks keys with its own schema: refused at the flush; dist and
             * select split them first: refused at once. */
            int rc = haar_archive_str(h, "class=od,expver=1,stream=oper", data, 10);
            if (rc == HAAR_OK) rc = haar_flush(h);
            CHECK(rc == HAAR_ERR_INPUT, "bad key through servers: %d", rc);
            CHECK(strstr(haar_last_error(), "class=od,expver=1,stream=oper") != NULL, "named");
        } else {
            FAILS(haar_archive_str(h, "class=od,expver=1,stream=oper", data, 10), HAAR_ERR_INPUT,
                  "class=od");
        }
        FAILS(haar_archive_str(h, "no key at all", data, 10), HAAR_ERR_INPUT, "no key at all");
        FAILS(haar_archive_str(h, k3, NULL, 10), HAAR_ERR_INPUT, "data is NULL");
        FAILS(haar_key_add(key, "", "x"), HAAR_ERR_INPUT, "keyword");
        FAILS(haar_key_add(key, "param", "1=2"), HAAR_ERR_INPUT, "\"1=2\" holds");
        FAILS(haar_key_add(key, "a,b", "1"), HAAR_ERR_INPUT, "\"a,b\" holds");
        FAILS(haar_key_add(key, NULL, "1"), HAAR_ERR_INPUT, "keyword is NULL");
        FAILS(haar_open("/nonexistent/haar.yaml", &none), HAAR_ERR_INPUT, "/nonexistent/haar.yaml");
        CHECK(none == NULL, "no handle on failure");
        FAILS(haar_open_yaml("backend: [not, a, backend]", &none), HAAR_ERR_INPUT, "haar_open_yaml");
        FAILS(haar_archive_grib(h, "GRIB not really", 15, NULL), HAAR_ERR_INPUT, "nothing archived");
        {
            /* GRIB2.tmpl has no MARS class: refused, naming what is missing. */
            size_t len, fields = 5;
            char *g = read_file("/usr/share/eccodes/samples/GRIB2.tmpl", &len);
            FAILS(haar_archive_grib(h, g, len, &fields), HAAR_ERR_INPUT, "class");
            CHECK(fields == 0, "nothing archived");
            free(g);
        }
        FAILS(haar_list(h, "frobnicate", NULL), HAAR_ERR_INPUT, "it is NULL");
        haar_list_t *it = NULL;
        FAILS(haar_list(h, "frobnicate", &it), HAAR_ERR_INPUT, "frobnicate");
        FAILS(haar_wipe(h, NULL, 1, NULL), HAAR_ERR_INPUT, "wipe");

        char req[300];
        snprintf(req, sizeof req, "%s,step=1/2,param=167", BASE);
        haar_reader_t *r = (haar_reader_t *)1;
        FAILS(haar_retrieve(h, req, &r), HAAR_ERR_MISSING, "step=2");
        CHECK(r == NULL, "no reader for missing data");
        FAILS(haar_retrieve(h, "param=999", &r), HAAR_ERR_MISSING, "param=999");

        /* Freed handles: each type. */
        haar_key_t *k2 = NULL;
        OK(haar_key_new(&k2));
        OK(haar_key_free(k2));
        FAILS(haar_key_add(k2, "step", "1"), HAAR_ERR_INPUT, "already freed");
        FAILS(haar_key_free(k2), HAAR_ERR_INPUT, "already freed");
        OK(haar_list(h, NULL, &it));
        OK(haar_list_free(it));
        FAILS(haar_list_next(it), HAAR_ERR_INPUT, "already freed");
        snprintf(req, sizeof req, "%s,step=0,param=167", BASE);
        OK(haar_retrieve(h, req, &r));
        OK(haar_reader_free(r));
        size_t n;
        FAILS(haar_reader_read(r, back, 10, &n), HAAR_ERR_INPUT, "already freed");
        /* One type passed for another. */
        FAILS(haar_list_next((haar_list_t *)key), HAAR_ERR_INPUT, "not a haar_list_t");
        haar_t *dead = NULL;
        OK(haar_open_yaml(yaml, &dead));
        OK(haar_close(dead));
        FAILS(haar_flush(dead), HAAR_ERR_INPUT, "already freed");
        FAILS(haar_close(dead), HAAR_ERR_INPUT, "already freed");
        OK(haar_close(NULL));
    }
    /* Nothing flushed was lost to the bad calls. */
    CHECK(count_list(h, "class=od,expver=1,date=20261121") == 7, "7 fields still there");

    /* ---- wipe and purge: dry runs change nothing, doit removes ---- */
    {
        haar_wipe_report_t wr;
        OK(haar_wipe(h, "class=od,expver=1,date=20261121,step=6", 0, &wr));
        CHECK(wr.fields + wr.databases >= 1, "dry run reports: %zu fields, %zu dbs", wr.fields, wr.databases);
        CHECK(count_list(h, "class=od,expver=1,date=20261121") == 7, "dry run removed nothing");
        OK(haar_wipe(h, "class=od,expver=1,date=20261121,step=6", 1, &wr));
        CHECK(wr.fields == 2 && wr.bytes == 2000, "wiped %zu fields %llu bytes", wr.fields,
              (unsigned long long)wr.bytes);
        CHECK(count_list(h, "class=od,expver=1,date=20261121") == 5, "2 wiped");
        haar_stats_t st;
        OK(haar_stats(h, "class=od,expver=1,date=20261121", &st));
        CHECK(st.databases == 1 && st.fields == 5 && st.dead_fields == 2 && st.dead_bytes == 2000,
              "stats: %zu dbs, %llu live, %llu dead (%llu bytes)", st.databases,
              (unsigned long long)st.fields, (unsigned long long)st.dead_fields,
              (unsigned long long)st.dead_bytes);
        FAILS(haar_stats(h, NULL, NULL), HAAR_ERR_INPUT, "stats is NULL");
        haar_purge_report_t pr;
        OK(haar_purge(h, NULL, 0, &pr));
        CHECK(pr.dropped_fields == 2, "purge dry run would drop 2, says %llu", (unsigned long long)pr.dropped_fields);
        OK(haar_purge(h, NULL, 1, &pr));
        CHECK(pr.dropped_fields == 2, "purge dropped %llu", (unsigned long long)pr.dropped_fields);
        OK(haar_purge(h, NULL, 0, &pr));
        CHECK(pr.dropped_fields == 0, "nothing left to purge");
        OK(haar_stats(h, "class=od,expver=1,date=20261121", &st));
        CHECK(st.fields == 5 && st.dead_fields == 0 && st.problems == 0,
              "after purge: %llu live, %llu dead", (unsigned long long)st.fields,
              (unsigned long long)st.dead_fields);
        CHECK(count_list(h, "class=od,expver=1,date=20261121") == 5, "5 left");
        /* The other fields read back intact after the purge. */
        char req[300];
        snprintf(req, sizeof req, "%s,step=1,param=167", BASE);
        haar_reader_t *r = NULL;
        OK(haar_retrieve(h, req, &r));
        size_t n = 0;
        OK(haar_reader_read(r, back, 1000, &n));
        fill(data, sizeof data, 1, 0);
        CHECK(n == 1000 && memcmp(back, data, 1000) == 0, "intact after purge");
        OK(haar_reader_free(r));
    }

    /* ---- haar_archive_with: values set and the field archived in one call ---- */
    {
        const char *kws[2] = {"step", "param"};
        const char *vals[2] = {"8", "165"};
        fill(data, sizeof data, 8, 1);
        OK(haar_archive_with(h, key, 2, kws, vals, data, sizeof data));
        vals[1] = "167";
        fill(data, sizeof data, 8, 0);
        OK(haar_archive_with(h, key, 2, kws, vals, data, sizeof data));
        const char *bad[2] = {"8", "1=2"};
        FAILS(haar_archive_with(h, key, 2, kws, bad, data, sizeof data), HAAR_ERR_INPUT, "1=2");
        FAILS(haar_archive_with(h, key, 2, NULL, vals, data, sizeof data), HAAR_ERR_INPUT, "n = 2");
        OK(haar_flush(h));
        CHECK(count_list(h, "class=od,expver=1,date=20261121,step=8") == 2, "2 fields at step 8");
        char req[300];
        snprintf(req, sizeof req, "%s,step=8,param=165", BASE);
        haar_reader_t *r = NULL;
        OK(haar_retrieve(h, req, &r));
        size_t n = 0;
        OK(haar_reader_read(r, back, 1000, &n));
        fill(data, sizeof data, 8, 1);
        CHECK(n == 1000 && memcmp(back, data, 1000) == 0, "archive_with round trip");
        OK(haar_reader_free(r));
    }

    OK(haar_key_free(key));
    OK(haar_close(h2));
    OK(haar_close(h));
    free(yaml);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("api_test: all checks passed\n");
    return 0;
}
