/* pause: the sandbox ("infra") process of a test pod.
 *
 * Sleeps until SIGTERM or SIGINT (then exits 0) and reaps any children it
 * inherits, like the kubelet's pause image. Built with `gcc -static` so the
 * image needs nothing but this one file. Part of qosd's test support.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    struct sigaction sa;
    (void)argv;
    if (argc > 1) {
        fputs("usage: pause\n", stderr);
        return 2;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) {
        pause();
    }
}
