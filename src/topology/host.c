/* Host identity: ranks whose identity matches share a host (and can use shared memory).
 * hostname + kernel boot id, so two containers or network namespaces with different hostnames
 * on one kernel count as different hosts; TUTTI_HOSTID overrides it. Machine identity: the boot
 * id alone, so those containers still count as sharing the machine's CPUs. */
#include <stdio.h>
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
