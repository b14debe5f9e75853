/* Host identity: ranks whose identity matches share a host (and can use shared memory).
 * hostname + kernel boot id, so two containers or network namespaces with different hostnames
 * on one kernel count as different hosts; TUTTI_HOSTID overrides it. Machine identity: the boot
 * id alone, so those containers still count as sharing the machine's CPUs. And the size of the
 * last-level cache this process's CPU sees, which decides where streaming stores pay. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"

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

/* The kernel's view of one cache of CPU cpu (index k of /sys/devices/system/cpu/cpuN/cache):
 * its level and its size in bytes ("16384K"); 0 when absent, an instruction cache, or unreadable.
 */
static int cache_level_size(int cpu, int k, int *level, size_t *bytes) {
  char path[128];
  const char *what[3] = {"level", "size", "type"};
  char val[3][32];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/%s", cpu, k, what[i]);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(val[i], sizeof(val[i]), f) != NULL;
    fclose(f);
    if (!ok) return 0;
    val[i][strcspn(val[i], "\n")] = '\0';
  }
  if (strcmp(val[2], "Instruction") == 0) return 0;
  char *end = NULL;
  unsigned long long v = strtoull(val[1], &end, 10);
  if (end == val[1]) return 0;
  if (*end == 'K')
    v <<= 10;
  else if (*end == 'M')
    v <<= 20;
  else if (*end == 'G')
    v <<= 30;
  *level = atoi(val[0]);
  *bytes = (size_t)v;
  return *level > 0 && v > 0;
}

size_t host_llc_bytes(int *cpu_out) {
  int cpu = sched_getcpu();
  if (cpu < 0) cpu = 0;
  if (cpu_out) *cpu_out = cpu;
  int best_level = 0;
  size_t best = 0;
  for (int k = 0; k < 16; k++) {
    int level;
    size_t bytes;
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d", cpu, k);
    if (access(path, F_OK) != 0) break; /* the indices are consecutive */
    if (cache_level_size(cpu, k, &level, &bytes) && level >= best_level)
      best_level = level, best = bytes;
  }
  return best;
}
