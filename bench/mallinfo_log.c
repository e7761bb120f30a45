// Diagnosis tool for the churn benchmark (bench/results/HISTORY.md section 7,
// "Churn, 30 min, live set held at 110"): preloaded into the daemon only,
// it appends glibc's mallinfo2() totals (every arena: bytes in use, free,
// mmapped) to $MALLINFO_OUT every $MALLINFO_EVERY seconds (10), so that a
// growing RSS can be told apart into live data and free memory the
// allocator keeps. Not a benchmark (it adds a thread).
//
//   gcc -O2 -shared -fPIC -o /tmp/mallinfo_log.so bench/mallinfo_log.c -lpthread
//   printf '#!/bin/sh\nLD_PRELOAD=/tmp/mallinfo_log.so MALLINFO_OUT=/tmp/mallinfo.txt exec %s "$@"\n' \
//       "$PWD/target/release/qosd" >/tmp/qosd-mallinfo; chmod +x /tmp/qosd-mallinfo
//   QOSD_BENCH_QOSD=/tmp/qosd-mallinfo QOSD_BENCH_CHURN_DURATION=600 \
//       cargo test --release --test bench_real -- --ignored --nocapture --exact churn
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *loop(void *arg) {
    const char *out = arg;
    const char *e = getenv("MALLINFO_EVERY");
    int every = e ? atoi(e) : 10;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct mallinfo2 m = mallinfo2();
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        FILE *f = fopen(out, "a");
        if (f) {
            fprintf(f, "%ld arena=%zu ordblks=%zu hblks=%zu hblkhd=%zu uordblks=%zu fordblks=%zu keepcost=%zu\n",
                    (long)(t.tv_sec - t0.tv_sec), m.arena, m.ordblks, m.hblks, m.hblkhd, m.uordblks, m.fordblks, m.keepcost);
            fclose(f);
        }
        sleep(every);
    }
    return NULL;
}

__attribute__((constructor)) static void start(void) {
    const char *out = getenv("MALLINFO_OUT");
    if (!out) return;
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_create(&th, &a, loop, (void *)out);
}
