/* thrash: keep a working set larger than the memory it may use, so that it
 * stalls on memory (pressure stall information) for as long as it runs,
 * without ever running out of memory.
 *
 *   thrash FILE          map FILE and read one byte of every page, forever
 *   thrash --anon MIB    hold MIB of anonymous memory and keep replacing it,
 *                        one MiB at a time, forever
 *
 * File mode: in a memory cgroup smaller than FILE (and FILE at most about
 * twice the cgroup's memory, so its pages count as working set), every
 * pass faults back in the pages the previous pass had to evict: thrashing
 * on file pages. Anon mode: above a cgroup's memory.high, without swap,
 * the kernel throttles every new allocation; replacing a MiB at a time
 * keeps allocating. Prints "thrash: running" once started, then one line
 * per pass ("thrash: pass N"); exits 0 on SIGTERM or SIGINT. Built with
 * `gcc -static` for qosd's tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1024L * 1024L)

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

static void file_mode(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "thrash: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        fprintf(stderr, "thrash: %s: empty or unreadable\n", path);
        exit(2);
    }
    long page = sysconf(_SC_PAGESIZE);
    volatile unsigned char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "thrash: mmap: %s\n", strerror(errno));
        exit(2);
    }
    printf("thrash: running\n");
    fflush(stdout);
    unsigned long sum = 0;
    for (long pass = 1;; pass++) {
        for (off_t off = 0; off < st.st_size; off += page)
            sum += p[off];
        printf("thrash: pass %ld %lu\n", pass, sum & 1);
        fflush(stdout);
    }
}

static void anon_mode(long mib) {
    if (mib <= 0 || mib > 1 << 20) {
        fprintf(stderr, "thrash: bad size %ld\n", mib);
        exit(2);
    }
    long page = sysconf(_SC_PAGESIZE);
    char **chunks = calloc(mib, sizeof *chunks);
    if (!chunks)
        exit(2);
    printf("thrash: running\n");
    fflush(stdout);
    for (long pass = 1;; pass++) {
        for (long i = 0; i < mib; i++) {
            if (chunks[i])
                munmap(chunks[i], MIB);
            chunks[i] = mmap(NULL, MIB, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (chunks[i] == MAP_FAILED) {
                chunks[i] = NULL;
                continue;
            }
            for (long off = 0; off < MIB; off += page)
                chunks[i][off] = (char)(pass + off);
        }
        printf("thrash: pass %ld\n", pass);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    if (argc == 2 && strcmp(argv[1], "--anon") != 0) {
        file_mode(argv[1]);
    } else if (argc == 3 && strcmp(argv[1], "--anon") == 0) {
        anon_mode(strtol(argv[2], NULL, 10));
    } else {
        fprintf(stderr, "usage: thrash FILE | thrash --anon MIB\n");
        return 2;
    }
    return 0;
}
