/* A target that tries to wedge its tracer (tests/wedge.rs), run as an
 * unprivileged user.
 *
 *   wedge stub               the page of the tracer's stub: see `protect`
 *   wedge seccomp CALLS [received]
 *                            a seccomp filter hands the system calls CALLS
 *                            (memfd_create, munmap; comma-separated) to a
 *                            listener that never answers (no_new_privs);
 *                            `received`: a child process takes each call
 *                            (SECCOMP_IOCTL_NOTIF_RECV) and still never
 *                            answers, and the filter says
 *                            SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, so
 *                            that a call taken waits killably: signals, a
 *                            tracer's interrupt included, do not end it
 *                            (the child's pid follows SLACK on the ready
 *                            line; killing it ends the calls it holds)
 *   wedge filtered PROG ARG...
 *                            runs PROG under a seccomp filter that allows
 *                            everything (a tracer in a container with a
 *                            seccomp profile: the kernel then refuses it
 *                            PTRACE_O_SUSPEND_SECCOMP); needs CAP_SYS_ADMIN
 *
 * `stub` and `seccomp` print "ready SLACK" once set up (SLACK: the bytes
 * past the end of the program's code segment in that segment's last page,
 * where the tracer puts its stub), then serve lines on stdin:
 *   protect    that last page becomes read-only, not executable:
 *              "protected STUB" (STUB 1: the bytes past the code's end are
 *              not all zero: the tracer's stub is there)
 *   unprotect  executable again: "unprotected"
 *   work N     work(i) for i < N: "worked SUM"
 * and exit 0 at the end of their input. `protect` fails (exit 2) if code
 * this program runs meanwhile lies in that page (see `pad`). */
#define _GNU_SOURCE
#include <link.h>
#include <signal.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

__attribute__((noinline)) long work(long x) { return x * 2 + 1; }

/* The end of the main program's executable segment (its file bytes). */
static uintptr_t code_end;

static int find_code(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            code_end = info->dlpi_addr + ph->p_vaddr + ph->p_filesz;
        }
    }
    return 1; /* the first object is the program */
}

static uintptr_t last_page(void) { return code_end & ~(uintptr_t)4095; }

static int in_last_page(void *f) {
    uintptr_t a = (uintptr_t)f;
    return a >= last_page() && a < last_page() + 4096;
}

int main(int argc, char **argv);

static void protect(int prot) {
    if (mprotect((void *)last_page(), 4096, prot) != 0) {
        perror("mprotect");
        exit(3);
    }
}

static int serve(void) {
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "protect\n") == 0) {
            if (in_last_page((void *)serve) || in_last_page((void *)protect) || in_last_page((void *)work) ||
                in_last_page((void *)main)) {
                printf("overlap\n");
                fflush(stdout);
                _exit(2);
            }
            int stub = 0;
            for (uintptr_t a = code_end; a < last_page() + 4096; a++) {
                stub |= *(volatile unsigned char *)a != 0;
            }
            protect(PROT_READ);
            printf("protected %d\n", stub);
        } else if (strcmp(line, "unprotect\n") == 0) {
            protect(PROT_READ | PROT_EXEC);
            printf("unprotected\n");
        } else if (strncmp(line, "work ", 5) == 0) {
            long n = atol(line + 5), sum = 0;
            for (long i = 0; i < n; i++) {
                sum += work(i);
            }
            printf("worked %ld\n", sum);
        }
        fflush(stdout);
    }
    return 0;
}

/* A filter over the system calls: `held` numbers go to the listener,
 * everything else is allowed. */
static int filter(const long *held, int n, unsigned flags) {
    struct sock_filter f[16];
    int k = 0;
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (int i = 0; i < n; i++) {
        f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, held[i], 0, 1);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
    }
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = (unsigned short)k, .filter = f};
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "filtered") == 0) {
        if (filter(NULL, 0, 0) != 0) {
            perror("seccomp");
            return 3;
        }
        execvp(argv[2], argv + 2);
        perror("exec");
        return 127;
    }
    dl_iterate_phdr(find_code, NULL);
    if (argc >= 3 && strcmp(argv[1], "seccomp") == 0) {
        long held[4];
        int n = 0;
        char *calls = argv[2], *name;
        while ((name = strsep(&calls, ",")) && n < 4) {
            if (strcmp(name, "memfd_create") == 0) {
                held[n++] = SYS_memfd_create;
            } else if (strcmp(name, "munmap") == 0) {
                held[n++] = SYS_munmap;
            }
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
            perror("prctl");
            return 3;
        }
        /* The listener's descriptor stays open and is never answered:
         * held calls wait for an answer forever. */
        int received = argc >= 4 && strcmp(argv[3], "received") == 0;
        unsigned flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | (received ? SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV : 0);
        int listener = filter(held, n, flags);
        if (listener < 0) {
            perror("seccomp");
            return 3;
        }
        if (received) {
            pid_t parent = getpid(), child = fork();
            if (child == 0) {
                static struct seccomp_notif req;
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent) {
                    _exit(0);
                }
                for (;;) {
                    memset(&req, 0, sizeof req);
                    ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req);
                }
            }
            close(listener); /* the child's alone: gone with it */
            printf("ready %lu %d\n", (unsigned long)(last_page() + 4096 - code_end), (int)child);
            fflush(stdout);
            return serve();
        }
    } else if (argc < 2 || strcmp(argv[1], "stub") != 0) {
        fprintf(stderr, "usage: wedge stub | seccomp CALLS | filtered PROG ARG...\n");
        return 2;
    }
    printf("ready %lu\n", (unsigned long)(last_page() + 4096 - code_end));
    fflush(stdout);
    return serve();
}

/* Last in the code segment: the code above stays out of the last page,
 * which `protect` makes non-executable. */
__attribute__((used, noinline)) void pad(void) { __asm__ volatile(".skip 8192, 0xcc"); }
