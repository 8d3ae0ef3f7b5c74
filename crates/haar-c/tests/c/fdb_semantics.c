/* FDB5's C API semantics that programs written for FDB5 rely on, checked the same way on any
 * libfdb5.so: haar's own test, shaped like the cases of FDB5's C API test (archive and list,
 * list depth, retrieve, expand) plus what issue 26 found haar doing differently (a retrieve
 * naming absent fields, list URIs, a re-archived field, wipe of an unclean database). Built
 * against FDB5 5.25's header; `tests/fdb_semantics.rs` runs it on FDB5 5.25's library and on
 * haar's, on a local TOC configuration whose schema types `param` as `ParamID`.
 *
 * Usage: fdb_semantics DIR   (DIR holds x138-300.grib, x138-400.grib, y138-400.grib; the
 * store comes from FDB5_CONFIG_FILE). Prints one line per case and "N checks, M failed". */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdb5/api/fdb_c.h"

static int g_checks, g_failed, g_case_failed;

#define CHECK(cond, ...)                                             \
    do {                                                             \
        g_checks++;                                                  \
        if (!(cond)) {                                               \
            g_failed++;                                              \
            g_case_failed++;                                         \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
        }                                                            \
    } while (0)
#define OK(call) CHECK((call) == FDB_SUCCESS, "%s", #call)

typedef struct {
    char *bytes;
    size_t len;
} blob;

static blob slurp(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    blob b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    b.len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    b.bytes = malloc(b.len);
    if (fread(b.bytes, 1, b.len, f) != b.len) exit(2);
    fclose(f);
    return b;
}

/* The field's key, with `levelist` and `expver` given. */
static fdb_key_t *field_key(const char *levelist, const char *expver) {
    fdb_key_t *k = NULL;
    OK(fdb_new_key(&k));
    const char *kv[][2] = {{"class", "rd"},     {"expver", expver}, {"stream", "oper"},
                           {"date", "20191110"}, {"time", "0000"},   {"domain", "g"},
                           {"type", "an"},       {"levtype", "pl"},  {"step", "0"},
                           {"levelist", levelist}, {"param", "138"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) OK(fdb_key_add(k, kv[i][0], kv[i][1]));
    return k;
}

/* A request for the field, `levelist` and `param` as `/`-separated lists. */
static fdb_request_t *field_request(const char *levelist, const char *param) {
    fdb_request_t *r = NULL;
    OK(fdb_new_request(&r));
    const char *kv[][2] = {{"class", "rd"},     {"expver", "xxxx"}, {"stream", "oper"},
                           {"date", "20191110"}, {"time", "0000"},   {"domain", "g"},
                           {"type", "an"},       {"levtype", "pl"},  {"step", "0"},
                           {"levelist", levelist}, {"param", param}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        char buf[256];
        const char *values[16];
        int n = 0;
        snprintf(buf, sizeof buf, "%s", kv[i][1]);
        for (char *s = strtok(buf, "/"); s && n < 16; s = strtok(NULL, "/")) values[n++] = s;
        OK(fdb_request_add(r, kv[i][0], values, n));
    }
    return r;
}

/* What a list of `req` (NULL: all) to `depth` holds: each element's keys as
 * "level:k=v,..." lines sorted, joined by '|' into `out`; returns the element count. The last
 * element's uri, offset and length are stored through the out-parameters when not NULL. */
static int list(fdb_handle_t *fdb, fdb_request_t *req, bool duplicates, int depth, char *out,
                size_t out_len, char *uri_out, size_t *off_out, size_t *len_out) {
    fdb_listiterator_t *it = NULL;
    if (out) out[0] = 0;
    if (fdb_list(fdb, req, &it, duplicates, depth) != FDB_SUCCESS) return -1;
    int n = 0, rc;
    char lines[64][512];
    while ((rc = fdb_listiterator_next(it)) == FDB_SUCCESS && n < 64) {
        if (depth == 3) { /* FDB5 gives attributes of fields only */
            const char *uri = NULL;
            size_t off = 0, len = 0;
            OK(fdb_listiterator_attrs(it, &uri, &off, &len));
            if (uri_out) snprintf(uri_out, 4096, "%s", uri ? uri : "");
            if (off_out) *off_out = off;
            if (len_out) *len_out = len;
        }
        fdb_split_key_t *sk = NULL;
        OK(fdb_new_splitkey(&sk));
        OK(fdb_listiterator_splitkey(it, sk));
        const char *k, *v;
        size_t level;
        lines[n][0] = 0;
        while (fdb_splitkey_next_metadata(sk, &k, &v, &level) == FDB_SUCCESS) {
            size_t used = strlen(lines[n]);
            snprintf(lines[n] + used, sizeof lines[n] - used, "%zu:%s=%s,", level, k, v);
        }
        OK(fdb_delete_splitkey(sk));
        n++;
    }
    CHECK(rc == FDB_ITERATION_COMPLETE, "list ends with FDB_ITERATION_COMPLETE (%d)", rc);
    OK(fdb_delete_listiterator(it));
    if (out) {
        /* Order-free: sort the lines (FDB5 lists newest first, haar by key). */
        qsort(lines, (size_t)n, sizeof lines[0], (int (*)(const void *, const void *))strcmp);
        /* Distinct elements: above depth 3 FDB5 lists an index once per index file. */
        int distinct = 0;
        for (int i = 0; i < n; i++) {
            if (i > 0 && !strcmp(lines[i], lines[i - 1])) continue;
            distinct++;
            strncat(out, lines[i], out_len - strlen(out) - 1);
            strncat(out, "|", out_len - strlen(out) - 1);
        }
        if (depth < 3) return distinct;
    }
    return n;
}

/* Retrieves `req` and returns its bytes (*len; NULL with *len = -1 if fdb_retrieve failed). */
static char *retrieve(fdb_handle_t *fdb, fdb_request_t *req, long *len) {
    fdb_datareader_t *dr = NULL;
    OK(fdb_new_datareader(&dr));
    *len = -1;
    char *bytes = NULL;
    if (fdb_retrieve(fdb, req, dr) == FDB_SUCCESS) {
        OK(fdb_datareader_open(dr, len));
        bytes = malloc((size_t)*len + 1);
        long got = 0, total = 0;
        while (total < *len &&
               fdb_datareader_read(dr, bytes + total, *len - total, &got) == FDB_SUCCESS && got > 0)
            total += got;
        CHECK(total == *len, "read %ld of %ld", total, *len);
        OK(fdb_datareader_close(dr));
    }
    OK(fdb_delete_datareader(dr));
    return bytes;
}

/* A new handle in place of `old`: an FDB5 handle that has read a database does not see what
 * is flushed there later, so every check after a write reads through a new one. */
static fdb_handle_t *reopen(fdb_handle_t *old) {
    fdb_handle_t *fdb = NULL;
    OK(fdb_delete_handle(old));
    OK(fdb_new_handle(&fdb));
    return fdb;
}

static const char *DB_KEYS = "0:class=rd,0:date=20191110,0:domain=g,0:expver=xxxx,0:stream=oper,0:time=0000,";

static void end_case(const char *name) {
    printf("case %s: %s\n", name, g_case_failed ? "FAILED" : "ok");
    g_case_failed = 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fdb_semantics DIR\n");
        return 2;
    }
    blob f300 = slurp(argv[1], "x138-300.grib"), f400 = slurp(argv[1], "x138-400.grib"),
         y400 = slurp(argv[1], "y138-400.grib");
    OK(fdb_initialise());
    fdb_handle_t *fdb = NULL;
    OK(fdb_new_handle(&fdb));
    char text[8192], expect[8192], uri[4096];
    size_t off = 0, len = 0;

    /* Archive and list: one field, its keys by level, where its bytes are (a file). */
    fdb_key_t *k300 = field_key("300", "xxxx");
    OK(fdb_archive(fdb, k300, f300.bytes, f300.len));
    OK(fdb_flush(fdb));
    fdb = reopen(fdb);
    fdb_request_t *r300 = field_request("300", "138");
    CHECK(list(fdb, r300, true, 3, text, sizeof text, uri, &off, &len) == 1, "one field: %s", text);
    snprintf(expect, sizeof expect, "%s1:levtype=pl,1:type=an,2:levelist=300,2:param=138,2:step=0,|",
             DB_KEYS);
    /* Keys compared as a set per element: order within a level is the library's. */
    char sorted_text[8192], sorted_expect[8192];
    CHECK(len == f300.len, "length %zu", len);
    int fd = open(uri, O_RDONLY);
    CHECK(fd >= 0, "the uri is a file path: %s", uri);
    if (fd >= 0) {
        char *b = malloc(len);
        CHECK(pread(fd, b, len, (off_t)off) == (ssize_t)len && !memcmp(b, f300.bytes, len),
              "the bytes at %s+%zu are the field's", uri, off);
        free(b);
        close(fd);
    }
    {
        /* Sort the comma-separated entries of one element to compare as a set. */
        const char *src[2] = {text, expect};
        char *dst[2] = {sorted_text, sorted_expect};
        for (int s = 0; s < 2; s++) {
            char copy[8192], *items[64];
            int n = 0;
            snprintf(copy, sizeof copy, "%s", src[s]);
            for (char *t = strtok(copy, ",|"); t && n < 64; t = strtok(NULL, ",|")) items[n++] = t;
            qsort(items, (size_t)n, sizeof items[0], (int (*)(const void *, const void *))strcmp);
            dst[s][0] = 0;
            for (int i = 0; i < n; i++) {
                strcat(dst[s], items[i]);
                strcat(dst[s], ",");
            }
        }
    }
    CHECK(!strcmp(sorted_text, sorted_expect), "keys\n  got    %s\n  wanted %s", sorted_text,
          sorted_expect);
    fdb_request_t *r139 = field_request("300", "139");
    CHECK(list(fdb, r139, true, 3, NULL, 0, NULL, NULL, NULL) == 0, "nothing of param=139");
    fdb_key_t *k400 = field_key("400", "xxxx");
    OK(fdb_archive(fdb, k400, f400.bytes, f400.len));
    OK(fdb_flush(fdb));
    fdb = reopen(fdb);
    fdb_request_t *both = field_request("400/300", "138");
    CHECK(list(fdb, both, true, 3, text, sizeof text, NULL, NULL, NULL) == 2, "two: %s", text);
    CHECK(strstr(text, "2:levelist=300,") && strstr(text, "2:levelist=400,"), "%s", text);
    end_case("archive and list");

    /* List depth: databases, then indexes, then fields. */
    fdb_key_t *ky = field_key("400", "xxxy");
    OK(fdb_archive(fdb, ky, y400.bytes, y400.len));
    OK(fdb_flush(fdb));
    fdb = reopen(fdb);
    CHECK(list(fdb, NULL, false, 1, text, sizeof text, NULL, NULL, NULL) == 2, "two databases: %s", text);
    CHECK(!strstr(text, "1:"), "depth 1 has no index keys: %s", text);
    CHECK(list(fdb, NULL, false, 2, text, sizeof text, NULL, NULL, NULL) == 2, "two indexes: %s", text);
    CHECK(strstr(text, "1:type=an") && !strstr(text, "2:"), "depth 2: %s", text);
    CHECK(list(fdb, NULL, false, 3, text, sizeof text, NULL, NULL, NULL) == 3, "three fields: %s", text);
    end_case("list depth");

    /* Retrieve: bytes, the reader's positions, two fields in one request. */
    long n1 = 0, n2 = 0;
    char *one = retrieve(fdb, r300, &n1);
    CHECK(n1 == (long)f300.len && one && !memcmp(one, f300.bytes, f300.len), "one field %ld", n1);
    free(one);
    fdb_datareader_t *dr = NULL;
    OK(fdb_new_datareader(&dr));
    OK(fdb_retrieve(fdb, r300, dr));
    long size = 0, pos = 0, got = 0;
    char head[8];
    OK(fdb_datareader_open(dr, &size));
    OK(fdb_datareader_read(dr, head, 4, &got));
    CHECK(got == 4 && !memcmp(head, "GRIB", 4), "starts with GRIB");
    OK(fdb_datareader_seek(dr, 2));
    OK(fdb_datareader_skip(dr, 5));
    OK(fdb_datareader_tell(dr, &pos));
    CHECK(pos == 7, "tell %ld", pos);
    OK(fdb_datareader_seek(dr, size - 4));
    OK(fdb_datareader_read(dr, head, 8, &got));
    CHECK(got == 4 && !memcmp(head, "7777", 4), "ends with 7777 (%ld)", got);
    OK(fdb_delete_datareader(dr));
    char *two = retrieve(fdb, both, &n2);
    CHECK(n2 == (long)(f300.len + f400.len), "two fields %ld", n2);
    free(two);
    end_case("retrieve");

    /* Absent fields: "Return all available data whose metadata matches". */
    fdb_request_t *partial = field_request("300/500", "138");
    char *p = retrieve(fdb, partial, &n1);
    CHECK(n1 == (long)f300.len && p && !memcmp(p, f300.bytes, f300.len), "300 of 300/500: %ld", n1);
    free(p);
    fdb_request_t *none = field_request("500", "138");
    free(retrieve(fdb, none, &n1));
    CHECK(n1 == 0, "nothing of 500: %ld", n1);
    end_case("retrieve partial");

    /* Expand: a date range becomes its dates; the absent day is left out. */
    fdb_request_t *range = field_request("300", "138");
    const char *dates[] = {"20191110", "to", "20191111"};
    OK(fdb_request_add(range, "date", dates, 3));
    OK(fdb_expand_request(range));
    char **values = NULL;
    size_t nv = 0;
    OK(fdb_request_get(range, "date", &values, &nv));
    CHECK(nv == 2 && !strcmp(values[0], "20191110") && !strcmp(values[1], "20191111"),
          "dates %zu", nv);
    for (size_t i = 0; i < nv; i++) free(values[i]);
    free(values);
    free(retrieve(fdb, range, &n1));
    CHECK(n1 == (long)f300.len, "one day of two: %ld", n1);
    end_case("expand");

    /* Re-archive: the newest copy is what is listed (without duplicates) and retrieved. */
    OK(fdb_archive(fdb, k300, y400.bytes, y400.len));
    OK(fdb_flush(fdb));
    fdb = reopen(fdb);
    /* FDB5's fdb_list passes `duplicates` on as FDB::list's `deduplicate`: true lists each key
     * once (the newest), false also the masked copy, which FDB5 and haar keep until a purge. */
    int listed = list(fdb, r300, true, 3, text, sizeof text, NULL, NULL, &len);
    int all_copies = list(fdb, r300, false, 3, NULL, 0, NULL, NULL, NULL);
    CHECK(listed == 1, "one, deduplicated: %d %s", listed, text);
    CHECK(all_copies == 2, "the newest and the masked copy: %d", all_copies);
    printf("re-archived field listed %d time(s) with duplicates=false\n", all_copies);
    CHECK(len == y400.len, "the newest's length %zu", len);
    char *newest = retrieve(fdb, r300, &n1);
    CHECK(n1 == (long)y400.len && newest && !memcmp(newest, y400.bytes, y400.len), "newest %ld", n1);
    free(newest);
    end_case("re-archive");

    /* Wipe of a database holding a file the library did not write: refused with doit, nothing
     * deleted; with unsafeWipeAll the database goes, file and all. */
    listed = list(fdb, r300, false, 3, NULL, 0, uri, NULL, NULL);
    CHECK(listed >= 1, "listed %d", listed);
    char dir[4096], foreign[4200];
    snprintf(dir, sizeof dir, "%s", uri);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    snprintf(foreign, sizeof foreign, "%s/foreign.txt", dir);
    FILE *ff = fopen(foreign, "w");
    CHECK(ff != NULL, "cannot write %s", foreign);
    if (ff) {
        fputs("not the library's\n", ff);
        fclose(ff);
    }
    fdb_request_t *db = NULL;
    OK(fdb_new_request(&db));
    const char *dbkv[][2] = {{"class", "rd"}, {"expver", "xxxx"}, {"stream", "oper"},
                             {"date", "20191110"}, {"time", "0000"}, {"domain", "g"}};
    for (size_t i = 0; i < 6; i++) {
        const char *v[] = {dbkv[i][1]};
        OK(fdb_request_add(db, dbkv[i][0], v, 1));
    }
    fdb_wipe_iterator_t *wit = NULL;
    int rc = fdb_wipe(fdb, db, true, false, false, &wit);
    int refused = rc != FDB_SUCCESS;
    if (rc == FDB_SUCCESS) {
        fdb_wipe_element_t *el = NULL;
        while ((rc = fdb_wipe_iterator_next(wit, &el)) == FDB_SUCCESS) {
            OK(fdb_delete_wipe_element(el));
            el = NULL;
        }
        if (el) fdb_delete_wipe_element(el);
        refused = rc != FDB_ITERATION_COMPLETE;
        OK(fdb_delete_wipe_iterator(wit));
    }
    CHECK(refused, "a wipe of an unclean database with doit is refused");
    fdb = reopen(fdb);
    struct stat st;
    CHECK(stat(foreign, &st) == 0, "the foreign file is still there");
    listed = list(fdb, NULL, true, 3, text, sizeof text, NULL, NULL, NULL);
    CHECK(listed == 3, "nothing was wiped: %d %s", listed, text);
    wit = NULL;
    OK(fdb_wipe(fdb, db, true, false, true, &wit));
    if (wit) {
        fdb_wipe_element_t *el = NULL;
        while ((rc = fdb_wipe_iterator_next(wit, &el)) == FDB_SUCCESS) {
            OK(fdb_delete_wipe_element(el));
            el = NULL;
        }
        CHECK(rc == FDB_ITERATION_COMPLETE, "unsafe wipe-all completes (%d)", rc);
        if (el) fdb_delete_wipe_element(el);
        OK(fdb_delete_wipe_iterator(wit));
    }
    CHECK(stat(foreign, &st) != 0, "unsafeWipeAll removed the foreign file");
    fdb = reopen(fdb);
    CHECK(list(fdb, NULL, true, 3, text, sizeof text, NULL, NULL, NULL) == 1, "only xxxy: %s", text);
    end_case("wipe unclean");

    fdb_request_t *reqs[] = {r300, r139, both, partial, none, range, db};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) OK(fdb_delete_request(reqs[i]));
    fdb_key_t *keys[] = {k300, k400, ky};
    for (size_t i = 0; i < 3; i++) OK(fdb_delete_key(keys[i]));
    OK(fdb_delete_handle(fdb));
    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
