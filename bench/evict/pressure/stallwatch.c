/* stallwatch: when did the stall start, and when did the victim die.
 *
 *   stallwatch PID TIMEOUT_MS SHARE_PCT WINDOW_MS FILE...
 *
 * Every 10 ms (poll(2) on a pidfd of PID, so the victim's exit is seen at
 * once) reads the `full` (and `some`) total= of each FILE (the node's
 * /proc/pressure/memory, a pod's memory.pressure). For each FILE, stall
 * onset is the first reading at which the `full` counter grew by at least
 * SHARE_PCT % of WINDOW_MS within the last WINDOW_MS (the kernel trigger's
 * condition, `full <stall> <window>`), and first_full the first reading
 * with any growth of `full`. Ends when PID exits or after TIMEOUT_MS;
 * prints one JSON object (milliseconds since start):
 *   {"died":true,"died_ms":..,"files":[{"path":..,"first_full_ms":..,
 *    "onset_ms":..,"full_ms":..,"some_ms":..}]}
 * with null for what did not happen, full_ms/some_ms the stall accumulated.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAXF 4
#define HIST 2048

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int read_totals(const char *path, long long *some, long long *full) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    *some = *full = -1;
    while (fgets(line, sizeof line, f)) {
        char *t = strstr(line, "total=");
        if (!t) continue;
        long long v = atoll(t + 6);
        if (!strncmp(line, "some", 4)) *some = v;
        if (!strncmp(line, "full", 4)) *full = v;
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: stallwatch PID TIMEOUT_MS SHARE_PCT WINDOW_MS FILE...\n");
        return 2;
    }
    int pid = atoi(argv[1]);
    double timeout = atof(argv[2]), share = atof(argv[3]), window = atof(argv[4]);
    int nf = argc - 5 > MAXF ? MAXF : argc - 5;
    char **files = argv + 5;
    int pfd = syscall(SYS_pidfd_open, pid, 0);
    double t0 = now_ms();
    double ht[MAXF][HIST];
    long long hf[MAXF][HIST];
    int hn[MAXF] = {0};
    long long some0[MAXF], full0[MAXF], some1[MAXF], full1[MAXF];
    double first_full[MAXF], onset[MAXF];
    for (int i = 0; i < nf; i++) {
        first_full[i] = onset[i] = -1;
        if (read_totals(files[i], &some0[i], &full0[i]) < 0) some0[i] = full0[i] = -1;
        some1[i] = some0[i];
        full1[i] = full0[i];
    }
    double died = -1;
    long long need = (long long)(share / 100.0 * window * 1000.0); /* µs */
    for (;;) {
        double t = now_ms() - t0;
        for (int i = 0; i < nf; i++) {
            long long s, f;
            if (read_totals(files[i], &s, &f) < 0 || f < 0) continue;
            some1[i] = s;
            full1[i] = f;
            int k = hn[i] % HIST;
            ht[i][k] = t;
            hf[i][k] = f;
            hn[i]++;
            if (first_full[i] < 0 && f > full0[i]) first_full[i] = t;
            if (onset[i] < 0) {
                /* the oldest reading still inside the window */
                long long base = -1;
                for (int j = hn[i] - 1; j >= 0 && j >= hn[i] - HIST; j--) {
                    if (t - ht[i][j % HIST] > window) break;
                    base = hf[i][j % HIST];
                }
                /* within the first window, count from the start */
                if (t <= window) base = full0[i];
                if (base >= 0 && f - base >= need) onset[i] = t;
            }
        }
        if (died >= 0 || t > timeout) break;
        if (pfd >= 0) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            if (poll(&p, 1, 10) > 0) died = now_ms() - t0;
        } else {
            usleep(10000);
            if (kill(pid, 0) != 0) died = now_ms() - t0;
        }
    }
    printf("{\"died\":%s,\"died_ms\":", died >= 0 ? "true" : "false");
    if (died >= 0) printf("%.1f", died); else printf("null");
    printf(",\"files\":[");
    for (int i = 0; i < nf; i++) {
        printf("%s{\"path\":\"%s\",\"first_full_ms\":", i ? "," : "", files[i]);
        if (first_full[i] >= 0) printf("%.1f", first_full[i]); else printf("null");
        printf(",\"onset_ms\":");
        if (onset[i] >= 0) printf("%.1f", onset[i]); else printf("null");
        printf(",\"full_ms\":%.1f,\"some_ms\":%.1f}", (full1[i] - full0[i]) / 1e3, (some1[i] - some0[i]) / 1e3);
    }
    printf("]}\n");
    return 0;
}
