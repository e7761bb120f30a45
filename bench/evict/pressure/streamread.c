/* streamread: re-read the first MIB MiB of PATH from start to end, forever,
 * through the page cache (read(2), 1 MiB at a time). In a memory cgroup
 * smaller than MIB the pages of one pass are evicted before the next needs
 * them: every pass refaults the file (a stall on file-backed pages) while
 * the cgroup's usage never exceeds its limit.
 *
 *   streamread PATH MIB
 *
 * Prints "streamread: pass N" per pass; exits 0 on SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: streamread PATH MIB\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    long mib = atol(argv[2]);
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "streamread: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    static char buf[1 << 20];
    for (long pass = 1;; pass++) {
        if (lseek(fd, 0, SEEK_SET) < 0) return 3;
        for (long i = 0; i < mib; i++) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) break;
        }
        if (pass <= 3 || pass % 10 == 0) {
            printf("streamread: pass %ld\n", pass);
            fflush(stdout);
        }
    }
}
