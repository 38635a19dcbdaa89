/* LD_PRELOAD shim for SystemTap's BPF runtime (stapbpf), used by bench/run.
 * stapbpf raises RLIMIT_MEMLOCK to infinity and gives up when that fails,
 * which it does without CAP_SYS_RESOURCE (a container, a VM sandbox). Since
 * Linux 5.11 BPF maps are charged to the memory cgroup, not to that limit, so
 * the failure is harmless: report success for RLIMIT_MEMLOCK only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/resource.h>

int setrlimit(__rlimit_resource_t resource, const struct rlimit *limit) {
    int (*real)(__rlimit_resource_t, const struct rlimit *) = dlsym(RTLD_NEXT, "setrlimit");
    int rc = real(resource, limit);
    return resource == RLIMIT_MEMLOCK ? 0 : rc;
}
