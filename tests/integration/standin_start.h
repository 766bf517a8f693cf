/* How the MPI stand-ins (nccl_tests_standin.c, hpl_mxp_standin.c, io_tools_standin.c) start: MPI_Init, then a
 * PMIx fence that collects data, so that no rank sends its first message before every rank has left MPI_Init.
 *
 * Why: on the test cluster (Debian 12: Slurm 22.05.8's mpi/pmix_v4 plugin, PMIx 4.2, Open MPI 4.1.4 with ob1 over
 * btl/tcp), the fence without data that ends Open MPI's MPI_Init completes on each node by itself under
 * `srun --mpi=pmix` (slurmd's PMIx debug log: every node is the root of a one-node tree, "local delivery"). A rank
 * can then leave MPI_Init and send while a rank on another node is still waiting in the modex fence, before ob1 has
 * registered its receive callbacks: that rank calls a NULL callback for the MATCH tag (65) in mca_btl_tcp and dies
 * of SIGSEGV ("Address not mapped ... (nil)"), and srun ends the step. Measured on this machine kind: 5 of 150
 * 4-node worlds crashed under load (cc18 and a CI run failed on it). The fence with data is a ring through every
 * node, a real barrier. This is a fault of that MPI stack, not of the launch the tests check, and the stand-ins
 * stand in for the tools' command lines and output, not for their start-up. Without a PMIx server (a singleton
 * run) PMIx_Init fails and nothing more is done.
 *
 * Build: mpicc ... $(pkg-config --cflags --libs pmix) (Debian's libpmix-dev, a dependency of libopenmpi-dev). */

#ifndef STANDIN_START_H
#define STANDIN_START_H

#include <mpi.h>
#include <pmix.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double standin_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* STANDIN_START_LATE_RANK=R (tests): rank R reaches the fence 2 s late, and every rank says on stderr when it
 * reached the fence and when it left it, so a test can see that no rank leaves before the last one arrived. */
static void standin_init(int *argc, char ***argv) {
  MPI_Init(argc, argv);
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *late = getenv("STANDIN_START_LATE_RANK");
  bool say = late && *late;
  if (say && atoi(late) == rank)
    sleep(2);
  if (say)
    fprintf(stderr, "stand-in start: rank %d reached the fence at %.6f\n", rank, standin_clock());
  pmix_proc_t me;
  if (size < 2 || PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS)
    return;
  pmix_info_t info;
  bool collect = true;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  pmix_status_t rc = PMIx_Fence(NULL, 0, &info, 1);
  if (rc != PMIX_SUCCESS)
    fprintf(stderr, "stand-in: PMIx_Fence after MPI_Init failed: %s\n", PMIx_Error_string(rc));
  PMIX_INFO_DESTRUCT(&info);
  PMIx_Finalize(NULL, 0);
  if (say)
    fprintf(stderr, "stand-in start: rank %d left the fence at %.6f\n", rank, standin_clock());
}

#endif
