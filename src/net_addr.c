/* The address this process offers the other ranks (see net_addr.h). */
#include "net_addr.h"

#include <stdio.h>
#include <string.h>

#include "topology/topo.h"

/* Step 1: the topology's NIC, when it has an address here. */
static ncclResult_t from_topology(const topo_t *t, sock_addr_t *addr, char *ifname, size_t len,
                                  int *found, char *reason, size_t rlen) {
  topo_nic_choice_t nic;
  *found = 0;
  if (!t) {
    snprintf(reason, rlen, "no topology");
    return ncclSuccess;
  }
  topo_choose_nic(t, TOPO_NIC_SOCKET, -1, NULL, &nic);
  if (nic.nic < 0) {
    snprintf(reason, rlen, "topology: %s", nic.reason);
    return ncclSuccess;
  }
  char exact[TOPO_NAME_CHARS + 1];
  snprintf(exact, sizeof(exact), "=%s", nic.name);
  TUTTI_CHECK(sock_find_addr(exact, addr, ifname, len, found));
  if (*found)
    snprintf(reason, rlen, "the topology's NIC: %s", nic.reason);
  else
    snprintf(reason, rlen, "the topology's NIC %s is down or has no address here (%s)", nic.name,
             nic.reason);
  return ncclSuccess;
}

ncclResult_t net_choose_local_addr(const struct topo *t, sock_addr_t *addr, char *ifname,
                                   size_t ifname_len, char *reason, size_t reason_len) {
  char which[64], why[TOPO_REASON_CHARS + 96];
  const char *spec = tutti_getenv_which("SOCKET_IFNAME", which, sizeof(which));
  int found = 0;
  TUTTI_CHECK(from_topology(t, addr, ifname, ifname_len, &found, why, sizeof(why)));
  if (found) {
    snprintf(reason, reason_len, "%s", why);
  } else if (spec) {
    TUTTI_CHECK(sock_find_addr(spec, addr, ifname, ifname_len, &found));
    if (!found)
      return TUTTI_ERR(ncclInvalidUsage,
                       "no network interface that is up with an address matches %s=\"%s\" (see "
                       "`ip addr`)",
                       which, spec);
    snprintf(reason, reason_len, "first interface matching %s=%s; %s", which, spec, why);
  } else {
    TUTTI_CHECK(sock_find_addr(NULL, addr, ifname, ifname_len, &found));
    if (found) {
      snprintf(reason, reason_len, "first interface up, not loopback or docker; %s", why);
    } else {
      sock_loopback_addr(addr);
      snprintf(ifname, ifname_len, "lo");
      snprintf(reason, reason_len, "no other interface is up; %s", why);
    }
  }
  if (addr->sa.sa_family == AF_INET6)
    addr->sin6.sin6_port = 0;
  else
    addr->sin.sin_port = 0;
  return ncclSuccess;
}

ncclResult_t net_local_addr(sock_addr_t *addr, char *ifname, size_t ifname_len) {
  const topo_t *t = NULL;
  char reason[TOPO_REASON_CHARS + 256], a[80];
  if (topo_get_process(&t) != ncclSuccess) {
    INFO(SUB_NET | SUB_INIT, "topology not available (%s)", tutti_last_error());
    tutti_clear_error();
    t = NULL;
  }
  TUTTI_CHECK(net_choose_local_addr(t, addr, ifname, ifname_len, reason, sizeof(reason)));
  INFO(SUB_NET | SUB_INIT, "socket address %s (%s): %s", sock_addr_str(addr, a, sizeof(a)), ifname,
       reason);
  return ncclSuccess;
}
