/* CPU lists ("0-3,8") and the proxy thread's CPUs (cpulist.h). */
#include "cpulist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "topology/topo.h"

int tutti_cpulist_parse(const char *s, cpu_set_t *set) {
  CPU_ZERO(set);
  if (*s == '\0') return 0;
  for (;;) {
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10), b = a;
    if (errno || end == s || a < 0 || a >= CPU_SETSIZE) return -1;
    if (*end == '-') {
      s = end + 1;
      b = strtol(s, &end, 10);
      if (errno || end == s || b < a || b >= CPU_SETSIZE) return -1;
    }
    for (long c = a; c <= b; c++) CPU_SET((int)c, set);
    if (*end == '\0') return 0;
    if (*end != ',') return -1;
    s = end + 1;
  }
}

void tutti_cpulist_format(const cpu_set_t *set, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && o + 24 < len; c++) {
    if (!CPU_ISSET(c, set) || (c > 0 && CPU_ISSET(c - 1, set))) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
    o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "", c);
    if (e > c) o += (size_t)snprintf(buf + o, len - o, "-%d", e);
  }
}

int tutti_solo_cpu(void) {
  cpu_set_t own;
  if (sched_getaffinity(0, sizeof own, &own) != 0 || CPU_COUNT(&own) != 1) return -1;
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &own)) cpu++;
  return cpu;
}

/* from less the CPUs of taken and cpu. */
static void cpus_less(cpu_set_t *from, const cpu_set_t *taken, int cpu) {
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, taken)) CPU_CLR(c, from);
  CPU_CLR(cpu, from);
}

int proxy_cpus_choose(const cpu_set_t *taken, cpu_set_t *set, char *why, size_t len) {
  const char *v = tutti_getenv("PROXY_CPUS");
  char list[1024];
  if (v && *v && strcmp(v, "auto") != 0) {
    if (strcmp(v, "inherit") == 0) {
      snprintf(why, len, "TUTTI_PROXY_CPUS=inherit");
      return 0;
    }
    if (tutti_cpulist_parse(v, set) != 0 || CPU_COUNT(set) == 0) {
      TUTTI_ERR(ncclInvalidArgument,
                "TUTTI_PROXY_CPUS=%s is not auto, inherit or a CPU list such as 2-7,10", v);
      return -1;
    }
    tutti_cpulist_format(set, list, sizeof list);
    snprintf(why, len, "TUTTI_PROXY_CPUS=%s", list);
    return 1;
  }
  int cpu = tutti_solo_cpu();
  if (cpu < 0) {
    snprintf(why, len, "the caller may run on several CPUs: the proxy thread shares them");
    return 0;
  }
  const topo_t *t = NULL;
  char node[TOPO_SET_CHARS], allowed[TOPO_SET_CHARS];
  cpu_set_t all;
  if (topo_get_process(&t) != ncclSuccess ||
      topo_helper_cpus(t, cpu, node, allowed, sizeof node) != 0 ||
      tutti_cpulist_parse(node, set) != 0 || tutti_cpulist_parse(allowed, &all) != 0) {
    tutti_clear_error();
    snprintf(why, len, "the topology does not say which CPUs are near CPU %d", cpu);
    return 0;
  }
  const char *from = "its NUMA node";
  cpus_less(set, taken, cpu);
  if (CPU_COUNT(set) == 0) { /* a node without a free CPU */
    from = "the machine";
    *set = all;
    cpus_less(set, taken, cpu);
  }
  if (CPU_COUNT(set) == 0) {
    snprintf(why, len,
             "every other CPU it may use is one a rank of this communicator is bound to alone");
    return 0;
  }
  snprintf(why, len,
           "the caller is bound to CPU %d alone: the proxy thread runs off it (the CPUs of %s "
           "the process may use, less those the ranks on this machine are bound to; "
           "TUTTI_PROXY_CPUS=inherit keeps it on CPU %d)",
           cpu, from, cpu);
  return 1;
}
