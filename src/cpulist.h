/* CPU lists as Linux writes them ("0-3,8"), and where a helper thread of a rank bound to one CPU
 * should run. */
#ifndef TUTTI_CPULIST_H_
#define TUTTI_CPULIST_H_

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stddef.h>

#include "tutti.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "0-3,8" -> set; 0 on success, -1 on a malformed list or a CPU beyond CPU_SETSIZE. An empty
 * string is the empty set. */
int tutti_cpulist_parse(const char *s, cpu_set_t *set);
/* set -> "0-3,8" (truncated to what fits in len). */
void tutti_cpulist_format(const cpu_set_t *set, char *buf, size_t len);

/* The one CPU the calling thread may run on, or -1 when it may run on several. */
int tutti_solo_cpu(void);

/* Where the proxy thread of a rank goes (TUTTI_PROXY_CPUS), decided from the calling thread's
 * affinity:
 *   auto (default)  the caller's mask, unless the caller is bound to a single CPU: then the
 *                   other CPUs of that CPU's NUMA node (of the machine when the node has none
 *                   free) that the process may use (the topology module: hwloc, the cgroup's
 *                   cpuset), less `taken` (the CPUs other ranks of the communicator on this
 *                   machine are bound to alone), so the proxy shares no CPU with a thread that
 *                   waits for its stream by spinning (CUDA's synchronize calls do by default);
 *                   the caller's CPU when nothing is left
 *   inherit         the caller's mask, whatever it is
 *   a CPU list      those CPUs ("2-7,10")
 * Returns 1 with *set and a sentence for the log in why, 0 when the thread keeps the caller's
 * mask (why says why), -1 when TUTTI_PROXY_CPUS is neither auto, inherit nor a non-empty CPU
 * list (the library's last error names it). */
int proxy_cpus_choose(const cpu_set_t *taken, cpu_set_t *set, char *why, size_t len);

#ifdef __cplusplus
}
#endif

#endif
