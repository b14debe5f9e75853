/* The address this process offers the other ranks: the bootstrap root's (ncclGetUniqueId) and
 * the tcp transport's data port. One decision, in net_addr.c. */
#ifndef TUTTI_NET_ADDR_H_
#define TUTTI_NET_ADDR_H_

#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

struct topo;

/* The decision on topology t (NULL: none), port 0, with its reason:
 *   1. t's socket NIC (topo_choose_nic: the interface closest to the calling thread's CPUs,
 *      then the fastest; TUTTI_SOCKET_IFNAME / NCCL_SOCKET_IFNAME filter its candidates) when
 *      that interface is up with an address here;
 *   2. else, with TUTTI_SOCKET_IFNAME / NCCL_SOCKET_IFNAME set, the first interface it matches
 *      (hwloc lists only interfaces on PCI devices: veth pairs, bridges and tunnels are found
 *      here); none is ncclInvalidUsage naming the setting;
 *   3. else the first interface up that is not loopback or docker;
 *   4. else loopback.
 * In each, an IPv4 address before an IPv6 one. */
ncclResult_t net_choose_local_addr(const struct topo *t, sock_addr_t *addr, char *ifname,
                                   size_t ifname_len, char *reason, size_t reason_len);
/* The same on the process topology (topo_get_process), logged at INFO with the reason. */
ncclResult_t net_local_addr(sock_addr_t *addr, char *ifname, size_t ifname_len);

#ifdef __cplusplus
}
#endif
#endif
