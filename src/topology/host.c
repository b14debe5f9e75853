/* Host identity: ranks whose identity matches share a host (and can use shared memory).
 * hostname + kernel boot id, so two containers or network namespaces with different hostnames
 * on one kernel count as different hosts; TUTTI_HOSTID overrides it. Machine identity: the boot
 * id alone, so those containers still count as sharing the machine's CPUs. And the size of the
 * last-level cache this process's CPU sees, which decides where streaming stores pay. */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "parse_num.h"

static uint64_t fnv1a(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static void boot_id(char *boot, size_t len) {
  boot[0] = '\0';
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, (int)len, f)) boot[0] = '\0';
    fclose(f);
  }
}

uint64_t host_identity(char *hostname, size_t len) {
  char name[HOST_NAME_BYTES] = "unknown";
  gethostname(name, sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  if (hostname) snprintf(hostname, len, "%s", name);
  const char *override = tutti_getenv("HOSTID");
  if (override) return fnv1a(0xcbf29ce484222325ull, override);
  char boot[64];
  boot_id(boot, sizeof(boot));
  return fnv1a(fnv1a(0xcbf29ce484222325ull, name), boot);
}

uint64_t machine_identity(void) {
  const char *override = tutti_getenv("HOSTID"); /* a fake host is a fake machine too */
  if (override) return fnv1a(0xcbf29ce484222325ull, override);
  char boot[64];
  boot_id(boot, sizeof(boot));
  return fnv1a(0x84222325cbf29ce4ull, boot);
}

/* One line of CPU cpu's cache index k in sysfs (/sys/devices/system/cpu/cpuN/cache/indexK/what),
 * without its newline; 0 when it cannot be read (past the last index). */
static int cache_attr(int cpu, int k, const char *what, char *buf, size_t len) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/%s", cpu, k, what);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  if (ok) buf[strcspn(buf, "\n")] = '\0';
  return ok;
}

size_t host_llc_bytes(int *cpu_out) {
  int cpu = sched_getcpu();
  if (cpu < 0) cpu = 0;
  if (cpu_out) *cpu_out = cpu;
  int64_t best_level = 0, best = 0;
  char level[32], type[32], size[32];
  for (int k = 0; cache_attr(cpu, k, "level", level, sizeof(level)); k++) {
    int64_t lv, bytes; /* size reads "16384K": the settings' syntax */
    if (!cache_attr(cpu, k, "type", type, sizeof(type)) || strcmp(type, "Instruction") == 0 ||
        !cache_attr(cpu, k, "size", size, sizeof(size)) || tutti_parse_int(level, &lv) ||
        tutti_parse_int(size, &bytes) || lv < best_level || bytes <= 0)
      continue;
    best_level = lv, best = bytes;
  }
  return (size_t)best;
}
