/* tutti-topo: prints the machine as tutti sees it (packages, NUMA nodes, caches, the PCI tree
 * with GPUs and NICs, the path matrix) and the decisions it would make for N local ranks (NIC,
 * binding, ring, P2P); --dump writes the hwloc XML to attach to a bug report.
 *
 *   tutti-topo                       this machine (or TUTTI_TOPO_FILE), 1 rank per GPU
 *   tutti-topo -n 4                  decisions for 4 local ranks
 *   tutti-topo --xml dgx.xml -n 8    a machine we do not have
 *   tutti-topo --dump topo.xml       export (also TUTTI_TOPO_DUMP_FILE)
 *   tutti-topo --time 10             discovery time: median of 10 live loads
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "topology/topo.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tutti-topo [-n RANKS] [--xml FILE] [--dump FILE] [--time RUNS] [-q]\n"
          "  -n, --ranks N   decisions for N hypothetical local ranks (default: one per GPU, "
          "or 1)\n"
          "  -x, --xml FILE  load an hwloc XML file instead of this machine\n"
          "  -d, --dump FILE export the topology as hwloc XML\n"
          "  -t, --time RUNS time RUNS live discoveries and print min/median/max\n"
          "  -q, --quiet     do not print the tree (decisions only)\n"
          "Environment: TUTTI_TOPO_FILE, TUTTI_TOPO_DUMP_FILE, TUTTI_P2P_LEVEL, TUTTI_IB_HCA,\n"
          "TUTTI_SOCKET_IFNAME, TUTTI_IGNORE_CPU_AFFINITY (and their NCCL_ names).\n");
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void print_stats(const char *what, double *ms, int runs) {
  qsort(ms, runs, sizeof(*ms), cmp_double);
  printf("  %-9s min %6.2f ms  median %6.2f ms  max %6.2f ms\n", what, ms[0], ms[runs / 2],
         ms[runs - 1]);
}

/* Wall time is what init pays; CPU time is what discovery costs on an idle machine (shared
 * machines inflate wall time with run-queue waits). */
static int time_discovery(int runs) {
  double *wall = calloc(runs, sizeof(*wall)), *cpu = calloc(runs, sizeof(*cpu));
  int rc = 0;
  for (int i = 0; wall && cpu && i < runs; i++) {
    topo_t *t = NULL;
    uint64_t t0 = tutti_time_ns();
    double c0 = cpu_ms();
    if (topo_load_live(&t) != ncclSuccess) {
      fprintf(stderr, "tutti-topo: discovery failed: %s\n", tutti_last_error());
      rc = 1;
      break;
    }
    topo_free(t);
    wall[i] = (tutti_time_ns() - t0) / 1e6;
    cpu[i] = cpu_ms() - c0;
  }
  if (wall && cpu && rc == 0) {
    printf("live discovery (hwloc init + load + tables + free), %d runs:\n", runs);
    print_stats("wall", wall, runs);
    print_stats("CPU", cpu, runs);
  }
  free(wall);
  free(cpu);
  return rc || !wall || !cpu;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"ranks", required_argument, 0, 'n'}, {"xml", required_argument, 0, 'x'},
      {"dump", required_argument, 0, 'd'},  {"time", required_argument, 0, 't'},
      {"quiet", no_argument, 0, 'q'},       {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, 'V'},     {0, 0, 0, 0}};
  const char *xml = NULL, *dump = NULL;
  int nranks = 0, runs = 0, quiet = 0, c;
  while ((c = getopt_long(argc, argv, "n:x:d:t:qh", opts, NULL)) != -1) {
    switch (c) {
      case 'n':
        nranks = atoi(optarg);
        break;
      case 'x':
        xml = optarg;
        break;
      case 'd':
        dump = optarg;
        break;
      case 't':
        runs = atoi(optarg);
        break;
      case 'q':
        quiet = 1;
        break;
      case 'h':
        usage(stdout);
        return 0;
      case 'V':
        printf("tutti-topo (tutti) %s\n", TUTTI_VERSION_STRING);
        return 0;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (optind < argc || nranks < 0 || nranks > 256 || runs < 0) {
    usage(stderr);
    return 2;
  }
  if (runs > 0) return time_discovery(runs);

  topo_t *t = NULL;
  ncclResult_t res = xml ? topo_load_xml(xml, &t) : topo_load(&t);
  if (res != ncclSuccess) {
    fprintf(stderr, "tutti-topo: %s\n", tutti_last_error());
    return 1;
  }
  if (!quiet) topo_print(t, stdout);
  topo_counts_t counts;
  topo_get_counts(t, &counts);
  if (nranks == 0) nranks = counts.gpus > 0 ? counts.gpus : 1;
  topo_print_decisions(t, nranks, stdout);
  int rc = 0;
  if (dump) {
    if (topo_export_xml(t, dump) == ncclSuccess) {
      printf("\ntopology written to %s\n", dump);
    } else {
      fprintf(stderr, "tutti-topo: %s\n", tutti_last_error());
      rc = 1;
    }
  }
  topo_free(t);
  return rc;
}
