/* A stand-in for IOR and mdtest (hpc/ior), for testing how srun / mpirun start them across nodes on a shared
 * filesystem, on machines where they are not installed. It does real file I/O through POSIX calls from every rank,
 * but it is NOT IOR or mdtest: its version is "standin" and its first line says so.
 *
 * One program, two names (it picks its role from the name it is started as):
 *
 * - ior: the options probes/storage/io_tools_run.py passes (-a POSIX -F -w -r -C -e -i 1 -t XFER -b BLOCK -o FILE);
 *   each rank writes BLOCK bytes to FILE.<rank, 8 digits> in XFER pieces (fsync before close with -e), then reads
 *   back, with -C, the file of the rank one node further on (its rank + ranks per node), and checks every byte. The
 *   bandwidth is the bytes of all ranks over the slowest rank's time between barriers, as IOR reports it. It prints
 *   IOR 3.3.0's "Summary of all tests:" table, the format probes/storage/io_tools.py reads from real captures
 *   (tests/fixtures/io_tools/ior/). A byte read back wrong prints IOR's own "WARNING: incorrect data" line.
 * - mdtest: -n N -i 1 -u -d DIR; each rank makes its own directory under DIR and creates, stats, reads and removes
 *   N directories and N files there, each phase timed between barriers; it prints mdtest 3.3.0's "launched with"
 *   line and "SUMMARY rate:" table (tests/fixtures/io_tools/mdtest/).
 *
 * Each rank's host is printed (`# rank R of S on HOST`), so a test sees where the world ran.
 *
 * Build: mpicc -O2 -o ior io_tools_standin.c $(pkg-config --cflags --libs pmix) && cp ior mdtest */

#define _GNU_SOURCE
#include "standin_start.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, size, local_size, nodes;

static void die(const char *what, const char *path) {
  fprintf(stderr, "io tools stand-in: rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static long long parse_size(const char *text) {
  char *end;
  long long value = strtoll(text, &end, 10);
  switch (*end) {
    case 'k': case 'K': return value << 10;
    case 'm': case 'M': return value << 20;
    case 'g': case 'G': return value << 30;
    default: return value;
  }
}

static void print_hosts(const char *what) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char *hosts = rank == 0 ? malloc((size_t)size * sizeof host) : NULL;
  MPI_Gather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("# %s stand-in (POSIX file I/O from MPI ranks, launch mechanics only): not %s\n", what, what);
    for (int r = 0; r < size; r++) printf("# rank %d of %d on %s\n", r, size, hosts + (size_t)r * sizeof host);
  }
  free(hosts);
}

/* The slowest rank's seconds for one phase, between barriers (what IOR and mdtest report). */
static double timed_max(double start) {
  double mine = MPI_Wtime() - start, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest > 0 ? slowest : 1e-9;
}

static unsigned char pattern(int owner, long long offset) { return (unsigned char)((owner * 131 + offset) & 0xff); }

static int ior(int argc, char **argv) {
  long long block = 1 << 20, xfer = 1 << 16;
  const char *file = "testfile";
  int do_fsync = 0, reorder = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) block = parse_size(argv[++i]);
    else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) xfer = parse_size(argv[++i]);
    else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) file = argv[++i];
    else if (strcmp(argv[i], "-e") == 0) do_fsync = 1;
    else if (strcmp(argv[i], "-C") == 0) reorder = 1;
    else if ((strcmp(argv[i], "-a") == 0 || strcmp(argv[i], "-i") == 0) && i + 1 < argc) i++;
  }
  if (xfer <= 0 || block < xfer || block % xfer) {
    if (rank == 0) fprintf(stderr, "ior stand-in: -b must be a multiple of -t\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  print_hosts("IOR");
  if (rank == 0) printf("IOR-standin: MPI Coordinated Test of Parallel I/O\n");
  char path[4096], peer_path[4096];
  snprintf(path, sizeof path, "%s.%08d", file, rank);
  unsigned char *buf = malloc((size_t)xfer);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) die("open", path);
  for (long long off = 0; off < block; off += xfer) {
    for (long long i = 0; i < xfer; i++) buf[i] = pattern(rank, off + i);
    if (write(fd, buf, (size_t)xfer) != xfer) die("write", path);
  }
  if (do_fsync && fsync(fd) != 0) die("fsync", path);
  close(fd);
  double write_s = timed_max(t0);
  int owner = reorder ? (rank + local_size) % size : rank;
  snprintf(peer_path, sizeof peer_path, "%s.%08d", file, owner);
  long long wrong = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  fd = open(peer_path, O_RDONLY);
  if (fd < 0) die("open", peer_path);
  for (long long off = 0; off < block; off += xfer) {
    if (read(fd, buf, (size_t)xfer) != xfer) die("read", peer_path);
    for (long long i = 0; i < xfer; i++) wrong += buf[i] != pattern(owner, off + i);
  }
  close(fd);
  double read_s = timed_max(t0);
  long long wrong_all = 0;
  MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  unlink(path);
  if (rank == 0) {
    double total_mib = (double)block * size / (1 << 20), ops = (double)block / xfer * size;
    if (wrong_all) printf("WARNING: incorrect data on read (%lld errors found).\n", wrong_all);
    printf("\nSummary of all tests:\n");
    printf("Operation   Max(MiB)   Min(MiB)  Mean(MiB)     StdDev   Max(OPs)   Min(OPs)  Mean(OPs)     StdDev    "
           "Mean(s) Stonewall(s) Stonewall(MiB) Test# #Tasks tPN reps fPP reord reordoff reordrand seed segcnt   "
           "blksiz    xsize aggs(MiB)   API RefNum\n");
    const char *names[2] = {"write", "read"};
    double secs[2] = {write_s, read_s};
    for (int k = 0; k < 2; k++) {
      double bw = total_mib / secs[k], op = ops / secs[k];
      printf("%-10s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.5f %12s %14s %5d %6d %3d %4d %3d "
             "%5d %8d %9d %4d %6d %8lld %8lld %9.1f %5s %6d\n",
             names[k], bw, bw, bw, 0.0, op, op, op, 0.0, secs[k], "NA", "NA", 0, size, local_size, 1, 1, reorder,
             local_size, 0, 0, 1, block, xfer, total_mib, "POSIX", 0);
    }
    printf("Finished            : stand-in\n");
  }
  free(buf);
  return 0;
}

static int mdtest(int argc, char **argv) {
  long n = 10;
  const char *dir = ".";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) n = atol(argv[++i]);
    else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) dir = argv[++i];
    else if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) i++;
  }
  print_hosts("mdtest");
  if (rank == 0) {
    printf("mdtest-standin was launched with %d total task(s) on %d node(s)\n", size, nodes);
    printf("\n%d tasks, %ld files/directories\n\n", size, n * size);
  }
  char own[4096], path[4200];
  snprintf(own, sizeof own, "%s/mdtest_tree.%d", dir, rank);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("mkdir", dir);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (mkdir(own, 0755) != 0) die("mkdir", own);
  double tree_create = timed_max(t0);
  const char *kinds[2] = {"dir", "file"};
  double rates[2][4];
  for (int k = 0; k < 2; k++) {
    struct stat st;
    t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
      snprintf(path, sizeof path, "%s/%s.mdtest.%d.%ld", own, kinds[k], rank, i);
      if (k == 0 ? mkdir(path, 0755) != 0 : close(open(path, O_CREAT | O_EXCL | O_WRONLY, 0644)) != 0)
        die("create", path);
    }
    rates[k][0] = n * size / timed_max(t0);
    t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
      snprintf(path, sizeof path, "%s/%s.mdtest.%d.%ld", own, kinds[k], rank, i);
      if (stat(path, &st) != 0) die("stat", path);
    }
    rates[k][1] = n * size / timed_max(t0);
    rates[k][2] = 0;
    if (k == 1) {
      char byte;
      t0 = MPI_Wtime();
      for (long i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s.mdtest.%d.%ld", own, kinds[k], rank, i);
        int fd = open(path, O_RDONLY);
        if (fd < 0 || read(fd, &byte, 0) < 0) die("read", path);
        close(fd);
      }
      rates[k][2] = n * size / timed_max(t0);
    }
    t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
      snprintf(path, sizeof path, "%s/%s.mdtest.%d.%ld", own, kinds[k], rank, i);
      if ((k == 0 ? rmdir(path) : unlink(path)) != 0) die("remove", path);
    }
    rates[k][3] = n * size / timed_max(t0);
  }
  t0 = MPI_Wtime();
  if (rmdir(own) != 0) die("rmdir", own);
  double tree_remove = timed_max(t0);
  if (rank == 0) {
    const char *rows[9] = {"Directory creation", "Directory stat", "Directory removal", "File creation", "File stat",
                           "File read", "File removal", "Tree creation", "Tree removal"};
    double values[9] = {rates[0][0], rates[0][1], rates[0][3], rates[1][0], rates[1][1], rates[1][2], rates[1][3],
                        size / tree_create, size / tree_remove};
    printf("SUMMARY rate: (of 1 iterations)\n");
    printf("   Operation                      Max            Min           Mean        Std Dev\n");
    printf("   ---------                      ---            ---           ----        -------\n");
    for (int r = 0; r < 9; r++)
      printf("   %-22s    : %14.3f %14.3f %14.3f %14.3f\n", rows[r], values[r], values[r], values[r], 0.0);
    printf("-- finished at stand-in --\n");
  }
  return 0;
}

int main(int argc, char **argv) {
  standin_init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &local_size);
  int first = 0, local_rank;
  MPI_Comm_rank(local, &local_rank);
  first = local_rank == 0;
  MPI_Allreduce(&first, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char *name = basename(argv[0]);
  int rc = strcmp(name, "mdtest") == 0 ? mdtest(argc, argv) : ior(argc, argv);
  MPI_Comm_free(&local);
  fflush(stdout);
  MPI_Finalize();
  return rc;
}
