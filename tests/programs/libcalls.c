/* A target for the libc tapset: a file opened and closed, a TCP
 * connection on loopback to itself (an ephemeral port: bound to 0), a
 * child that runs /bin/true, a library loaded, then exit(3). It prints
 * nothing (the tracer's output is what the tests read). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    int fd = open("/proc/self/stat", O_RDONLY);
    if (fd < 0) return 1;
    close(fd);

    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &len))
        return 2;
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, sizeof a)) return 3;
    int s = accept(l, 0, 0);
    if (s < 0) return 4;
    char buf[16];
    if (send(c, "hello", 5, 0) != 5 || recv(s, buf, sizeof buf, 0) != 5) return 5;
    close(s);
    close(c);
    close(l);

    pid_t p = fork();
    if (p == 0) {
        char *argv[] = {"true", 0};
        execve("/bin/true", argv, 0);
        _exit(127);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 6;

    if (!dlopen("libm.so.6", RTLD_NOW)) return 7;
    exit(3);
}
