/* memhog: hold a chosen amount of anonymous memory, optionally growing.
 *
 *   memhog <initial MiB> [<step MiB> <interval ms> <max MiB>]
 *
 * Allocates <initial MiB>, touching every page so it is really resident,
 * then every <interval ms> grows by <step MiB> until <max MiB>. SIGUSR1
 * grows by one step (16 MiB when no step is given) at any time, up to
 * <max MiB> when given. SIGUSR2 frees everything above <initial MiB> and
 * stops the timed growth. Prints "memhog: <n> MiB" to stdout after each change
 * and exits 0 on SIGTERM/SIGINT — unless the first argument is
 * `--ignore-term`, which makes it ignore SIGTERM (a pod that uses its whole
 * termination grace period). Built with `gcc -static` for the test
 * images of qosd; an OOM kill ends it with 137 like any container.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024L * 1024L)
#define MAX_CHUNKS 65536

static void *chunks[MAX_CHUNKS];
static long held;
static volatile sig_atomic_t grow_requests;
static volatile sig_atomic_t shrink_requested;

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}
static void on_usr1(int sig) {
    (void)sig;
    grow_requests++;
}
static void on_usr2(int sig) {
    (void)sig;
    shrink_requested = 1;
}

static long parse_num(const char *s, const char *what) {
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "memhog: bad %s: %s\n", what, s);
        exit(2);
    }
    return v;
}

static void grow_to(long mib) {
    long page = sysconf(_SC_PAGESIZE);
    while (held < mib && held < MAX_CHUNKS) {
        char *p = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        long off;
        if (p == MAP_FAILED) {
            perror("memhog: mmap");
            return;
        }
        for (off = 0; off < MIB; off += page) {
            p[off] = (char)(off / page + 1);
        }
        chunks[held++] = p;
    }
}

static void shrink_to(long mib) {
    while (held > mib) {
        munmap(chunks[--held], MIB);
    }
}

static void report(void) {
    printf("memhog: %ld MiB\n", held);
    fflush(stdout);
}

int main(int argc, char **argv) {
    long initial, step = 0, interval_ms = 0, max = 0;
    struct sigaction sa;
    int ignore_term = 0;

    if (argc > 1 && strcmp(argv[1], "--ignore-term") == 0) {
        ignore_term = 1;
        argv++;
        argc--;
    }
    if (argc != 2 && argc != 5) {
        fputs("usage: memhog <initial MiB> [<step MiB> <interval ms> <max MiB>]\n", stderr);
        return 2;
    }
    initial = parse_num(argv[1], "initial MiB");
    if (argc == 5) {
        step = parse_num(argv[2], "step MiB");
        interval_ms = parse_num(argv[3], "interval ms");
        max = parse_num(argv[4], "max MiB");
    }
    if (argc == 2 || max < initial) {
        max = argc == 2 ? MAX_CHUNKS : initial;
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = ignore_term ? SIG_IGN : on_term;
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);

    grow_to(initial);
    report();
    for (;;) {
        if (shrink_requested) {
            shrink_requested = 0;
            shrink_to(initial);
            interval_ms = 0; /* and stop growing by itself */
            report();
        }
        if (step > 0 && interval_ms > 0 && held < max) {
            struct timespec ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL); /* a signal cuts it short; that is fine */
            if (!shrink_requested) {
                grow_to(held + step < max ? held + step : max);
                report();
            }
        } else if (grow_requests > 0) {
            grow_requests--;
            long want = held + (step > 0 ? step : 16);
            grow_to(want < max ? want : max);
            report();
        } else {
            pause();
        }
    }
}
