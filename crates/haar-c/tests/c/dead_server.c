/* A server that is not there: every call gives HAAR_ERR_STORAGE naming it, never a crash.
 * usage: dead_server HOST:PORT */
#include "haar.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char yaml[256];
    snprintf(yaml, sizeof yaml, "type: remote\nserver: '%s'\n", argv[1]);
    haar_t *h = NULL;
    int rc = haar_open_yaml(yaml, &h);
    if (rc == HAAR_OK) {
        /* Connected lazily: the first call that needs the server fails. */
        rc = haar_archive_str(h,
                              "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,"
                              "type=fc,levtype=sfc,step=0,param=167",
                              "x", 1);
        if (rc == HAAR_OK) rc = haar_flush(h);
    }
    const char *msg = haar_last_error();
    printf("rc=%d message=%s\n", rc, msg);
    if (rc != HAAR_ERR_STORAGE || strstr(msg, argv[1]) == NULL) {
        fprintf(stderr, "expected HAAR_ERR_STORAGE naming %s\n", argv[1]);
        return 1;
    }
    size_t fields = 0;
    rc = h ? haar_wait(h, "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,"
                          "levtype=sfc,step=0,param=167",
                       0.5, &fields)
           : HAAR_ERR_STORAGE;
    if (rc != HAAR_ERR_STORAGE) {
        fprintf(stderr, "wait on a dead server: rc=%d %s\n", rc, haar_last_error());
        return 1;
    }
    haar_close(h);
    printf("dead_server: ok\n");
    return 0;
}
