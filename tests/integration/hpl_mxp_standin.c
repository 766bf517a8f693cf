/* A stand-in for xhpl_mxp (HPL-MxP of the NVIDIA HPC-Benchmarks), for testing launch mechanics (srun / mpirun
 * starting HPL-MxP across nodes) on machines without GPUs. NOT a GPU measurement and NOT a solve.
 *
 * It takes xhpl_mxp's command line (--n --nb --nprow --npcol --sloppy-type, as probes/gpu_compute/hpl_mxp.py passes
 * them; other --options are accepted with their value) and checks what the real program needs of its launch: one
 * rank per cell of the NPROW x NPCOL grid. Then it does the communication HPL's panel factorisation drives: for each
 * of the N / NB block columns, the owning rank broadcasts an NB x (N / NPROW) panel of doubles (MPI_Bcast, capped at
 * 1 MiB a panel) and every rank checks every value it received. It prints in xhpl_mxp's result format (26.2.0: the
 * threshold line, the scaled-residual check line, the N / NB / grid line, the GFLOPS and LU GFLOPS lines), so that
 * the probe's parser reads it as it reads the real output; the "residual" is the number of wrong values received
 * (PASSED when none), and the GFLOP/s are HPL's operation count over the broadcast time. The first line says that it
 * is a stand-in; no HPL-MxP-NVIDIA version line is printed. Each rank's host is printed (`# rank R of S on HOST`).
 *
 * Fault injection: STANDIN_FAIL_RANK=R with STANDIN_FAIL_MODE=exit|kill|hang makes rank R exit(3), raise SIGKILL or
 * sleep for ever after the first panel. Every rank needs the variables (mpirun -x, srun --export).
 *
 * Build: mpicc -O2 -o xhpl_mxp hpl_mxp_standin.c $(pkg-config --cflags --libs pmix) */

#define _GNU_SOURCE
#include "standin_start.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PANEL_CAP (1 << 17) /* doubles per broadcast: 1 MiB */

static const char *format_name(const char *value) {
  if (strcmp(value, "1") == 0 || strcmp(value, "FP8") == 0) return "FP8";
  if (strcmp(value, "2") == 0 || strcmp(value, "FP16") == 0) return "FP16";
  return value;
}

static double panel_value(long step, long i) { return (double)(step * 7919 + i % 104729) * 0.5; }

static void maybe_fail(int rank) {
  const char *who = getenv("STANDIN_FAIL_RANK");
  const char *mode = getenv("STANDIN_FAIL_MODE");
  if (!who || !mode || atoi(who) != rank) return;
  fflush(stdout);
  if (strcmp(mode, "exit") == 0) exit(3);
  if (strcmp(mode, "kill") == 0) raise(SIGKILL);
  if (strcmp(mode, "hang") == 0)
    for (;;) sleep(60);
}

int main(int argc, char **argv) {
  long n = 0, nb = 0;
  int nprow = 0, npcol = 0;
  const char *sloppy = "FP16";
  standin_init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--n") == 0) n = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--nb") == 0) nb = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--nprow") == 0) nprow = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--npcol") == 0) npcol = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--sloppy-type") == 0) sloppy = format_name(argv[i + 1]);
  }
  if (n <= 0 || nb <= 0 || nprow <= 0 || npcol <= 0 || n % nb) {
    if (rank == 0) fprintf(stderr, "xhpl_mxp stand-in: need --n (a multiple of --nb), --nb, --nprow, --npcol\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (nprow * npcol != size) {
    if (rank == 0)
      fprintf(stderr, "xhpl_mxp stand-in: NPROW x NPCOL = %d x %d needs %d ranks, started with %d\n", nprow, npcol,
              nprow * npcol, size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char *hosts = rank == 0 ? malloc((size_t)size * sizeof host) : NULL;
  MPI_Gather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("# xhpl_mxp stand-in (MPI broadcasts on CPU, launch mechanics only): not a GPU measurement\n");
    for (int r = 0; r < size; r++) printf("# rank %d of %d on %s\n", r, size, hosts + (size_t)r * sizeof host);
    fflush(stdout);
  }
  long count = nb * (n / nprow);
  if (count > PANEL_CAP) count = PANEL_CAP;
  double *panel = malloc((size_t)count * sizeof(double));
  long wrong = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long step = 0; step < n / nb; step++) {
    int root = (int)(step % size);
    if (rank == root)
      for (long i = 0; i < count; i++) panel[i] = panel_value(step, i);
    MPI_Bcast(panel, (int)count, MPI_DOUBLE, root, MPI_COMM_WORLD);
    for (long i = 0; i < count; i++) wrong += panel[i] != panel_value(step, i);
    if (step == 0) maybe_fail(rank);
  }
  double elapsed = MPI_Wtime() - t0, slowest = 0;
  long wrong_all = 0;
  MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double dn = (double)n, flops = 2.0 / 3.0 * dn * dn * dn + 1.5 * dn * dn;
    double gflops = flops / (slowest > 0 ? slowest : 1e-9) / 1e9;
    printf("    Threshold     . . . . . . . . . . . . . . . . .          =    1.600000E+01\n");
    printf("  ||Ax-b||_oo / (EPS * (||A||_oo * ||x||_oo + ||b||_oo) * N) =    %.6E ...... %s\n", (double)wrong_all,
           wrong_all ? "FAILED" : "PASSED");
    printf("    N = %ld, NB = %ld, NPROW = %d, NPCOL = %d, SLOPPY-TYPE = %s\n", n, nb, nprow, npcol, sloppy);
    printf("       GFLOPS = %.4e, per GPU = %10.2f ------ The HPL-MxP performance to report\n", gflops,
           gflops / size);
    printf("    LU GFLOPS = %.4e, per GPU = %10.2f ------ The performance excluding the iterative solver part\n",
           gflops, gflops / size);
  }
  free(panel);
  free(hosts);
  MPI_Finalize();
  return 0;
}
