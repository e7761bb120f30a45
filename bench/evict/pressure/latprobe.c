/* latprobe: the latency probe pod's process. Wakes every 10 ms on an
 * absolute CLOCK_MONOTONIC schedule and records how late each wake-up was.
 * On SIGTERM writes one JSON object to OUT and exits:
 *   {"samples":N,"p50_ms":..,"p99_ms":..,"max_ms":..,"over_100ms":..}
 * A wake-up that comes after several periods counts once, with its full
 * lateness (the missed periods are skipped, not replayed).
 *
 *   latprobe OUT
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PERIOD_NS 10000000L
#define MAXS 200000

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }
static long ns(struct timespec t) { return t.tv_sec * 1000000000L + t.tv_nsec; }
static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: latprobe OUT\n");
        return 2;
    }
    static long late[MAXS];
    long n = 0;
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    struct timespec next, now;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!stop) {
        long t = ns(next) + PERIOD_NS;
        next.tv_sec = t / 1000000000L;
        next.tv_nsec = t % 1000000000L;
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) != 0) continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long l = ns(now) - ns(next);
        if (n < MAXS) late[n++] = l;
        if (l > PERIOD_NS) next = now; /* skip the missed periods */
    }
    qsort(late, n, sizeof late[0], cmp);
    long over = 0;
    for (long i = 0; i < n; i++) over += late[i] > 100000000L;
    FILE *f = fopen(argv[1], "w");
    if (!f) return 3;
    if (n == 0) {
        fprintf(f, "{\"samples\":0}\n");
    } else {
        long k99 = (n * 99 + 99) / 100 - 1, k50 = (n + 1) / 2 - 1;
        fprintf(f, "{\"samples\":%ld,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"over_100ms\":%ld}\n", n,
                late[k50] / 1e6, late[k99] / 1e6, late[n - 1] / 1e6, over);
    }
    fclose(f);
    return 0;
}
