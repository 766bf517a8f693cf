/* A stand-in for NVIDIA nccl-tests' <collective>_perf binaries, for testing launch mechanics (srun / mpirun
 * starting nccl-tests across nodes) on machines without GPUs. NOT a GPU or NCCL measurement.
 *
 * One source, five names: the collective is chosen from argv[0]'s basename (all_reduce_perf, all_gather_perf,
 * reduce_scatter_perf, alltoall_perf, broadcast_perf; an `_mpi` suffix is accepted too). It takes nccl-tests'
 * command line (-b -e -f -i -g -t -w -n -m -c -d -o -r -a -N, and accepts and ignores -p -z -y -T -G -C -R -u -J)
 * and prints nccl-tests' text format (src/util.cu of nccl-tests 2.17: header, one `#  Rank` line per rank, the
 * column header, one row per size with out-of-place and in-place columns, the footer), so that a parser of real
 * nccl-tests output reads it the same way. The first line says that it is a stand-in; no `# nccl-tests version`
 * line is printed. `-h` does not list -J: no JSON file is ever written.
 *
 * Each size runs a real MPI collective on float buffers (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
 * MPI_Alltoall, MPI_Bcast; in-place with MPI_IN_PLACE), timed with MPI_Wtime over -n iterations, and is checked
 * against the expected result (#wrong = wrong elements summed over ranks). Sizes, counts, algbw and busbw follow
 * nccl-tests: per-rank chunks of all_gather / reduce_scatter / alltoall are rounded down to 16 bytes, algbw is
 * the printed size / time, busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, alltoall),
 * 1 (broadcast). As in nccl-tests, in-place alltoall is not checked (#wrong N/A).
 *
 * Fault injection: STANDIN_FAIL_RANK=R with STANDIN_FAIL_MODE=exit|kill|hang makes rank R exit(3), raise
 * SIGKILL, or sleep for ever once the first size's row has been printed. Every rank needs the variables (mpirun
 * -x, srun --export): a rank without them does not fail.
 *
 * Build: mpicc -O2 -o all_reduce_perf nccl_tests_standin.c $(pkg-config --cflags --libs pmix) (then link or copy
 * it under the other names). */

#define _GNU_SOURCE
#include "standin_start.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STANDIN_BANNER "# nccl-tests stand-in (MPI collectives on CPU, launch mechanics only): not a GPU measurement"
#define MAX_LINE 2048

enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST, NCOLL };
static const char *coll_names[NCOLL] = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"};

/* nccl-tests' command line and defaults (src/common.cu) */
static int nThreads = 1, nGpus = 1;
static size_t minBytes = 32 * 1024 * 1024, maxBytes = 32 * 1024 * 1024, stepBytes = 1 * 1024 * 1024,
              stepFactor = 1;
static int datacheck = 1, warmup_iters = 5, iters = 20, agg_iters = 1, run_cycles = 1, root_arg = 0,
           average = 1, report_cputime = 0, graph_launches = 0;

static int coll, nranks = 1, rank = 0;
static int fail_rank = -1;
static const char *fail_mode;

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* nccl-tests' parsesize: a number with an optional K/M/G (powers of 1024) */
static double parse_size(const char *value) {
  double size;
  char lit[2];
  int count = sscanf(value, "%lf %1s", &size, lit);
  if (count == 1) return size;
  if (count != 2) return -1.0;
  switch (lit[0]) {
    case 'G': case 'g': return size * 1024.0 * 1024.0 * 1024.0;
    case 'M': case 'm': return size * 1024.0 * 1024.0;
    case 'K': case 'k': return size * 1024.0;
    default: return -1.0;
  }
}

static void usage(const char *prog) {
  printf("%s\n", STANDIN_BANNER);
  printf("USAGE: %s \n\t"
         "[-t,--nthreads <num threads>] \n\t"
         "[-g,--ngpus <gpus per thread>] \n\t"
         "[-b,--minbytes <min size in bytes>] \n\t"
         "[-e,--maxbytes <max size in bytes>] \n\t"
         "[-i,--stepbytes <increment size>] \n\t"
         "[-f,--stepfactor <increment factor>] \n\t"
         "[-n,--iters <iteration count>] \n\t"
         "[-m,--agg_iters <aggregated iteration count>] \n\t"
         "[-w,--warmup_iters <warmup iteration count>] \n\t"
         "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
         "[-p,--parallel_init <0/1>] \n\t"
         "[-c,--check <check iteration count>] \n\t"
         "[-o,--op <sum>] \n\t"
         "[-d,--datatype <float>] \n\t"
         "[-r,--root <root>] \n\t"
         "[-z,--blocking <0/1>] \n\t"
         "[-y,--stream_null <0/1>] \n\t"
         "[-T,--timeout <time in seconds>] \n\t"
         "[-G,--cudagraph <num graph launches>] \n\t"
         "[-C,--report_cputime <0/1>] \n\t"
         "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
         "[-R,--local_register <1/0> enable local buffer registration on send/recv buffers (default: disable)] \n\t"
         "[-h,--help]\n",
         prog);
}

/* nccl-tests' getFloatStr: a number in `width` characters, fewer decimals as it grows */
static void float_str(double value, int width, char *str) {
  int power = 0;
  for (uint64_t val = 1; value >= val; val *= 10) power++;
  if (power < width - 2) sprintf(str, "%*.2f", width, value);
  else if (power < width - 1) sprintf(str, "%*.1f", width, value);
  else if (power < width + 1) sprintf(str, "%*.0f", width, value);
  else sprintf(str, "%*.1e", width, value);
}

/* nccl-tests' getCollByteCount, in elements: what each rank sends, receives, and the count the call takes */
static void coll_counts(size_t count, size_t *send, size_t *recv, size_t *param) {
  size_t base = (count / (size_t)nranks) & ~(size_t)3; /* (count/nranks) & -(16/sizeof(float)) */
  switch (coll) {
    case ALL_GATHER: *send = base; *recv = base * nranks; *param = base; break;
    case REDUCE_SCATTER: *send = base * nranks; *recv = base; *param = base; break;
    case ALLTOALL: *send = base * nranks; *recv = base * nranks; *param = base; break;
    default: *send = count; *recv = count; *param = count; break; /* all_reduce, broadcast */
  }
}

static double busbw_factor(void) {
  if (coll == ALL_REDUCE) return 2.0 * (nranks - 1) / nranks;
  if (coll == BROADCAST) return 1.0;
  return (double)(nranks - 1) / nranks;
}

/* The value rank r puts at element j of its input: small integers, so that sums are exact in float. */
static float input_value(int r, size_t j, int rep) {
  return (float)(((uint64_t)j * 7u + (uint64_t)r * 13u + (uint64_t)rep * 3u) % 61u + 1u);
}

static void run_coll(int in_place, float *send, float *recv, size_t param, int root) {
  int n = (int)param;
  switch (coll) {
    case ALL_REDUCE:
      MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALL_GATHER:
      if (in_place) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case REDUCE_SCATTER:
      MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALLTOALL:
      if (in_place) MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case BROADCAST: /* out-of-place: the root sends from its send buffer and, as ncclBroadcast, fills its recv */
      MPI_Bcast((!in_place && rank == root) ? send : recv, n, MPI_FLOAT, root, MPI_COMM_WORLD);
      if (!in_place && rank == root && n) memcpy(recv, send, param * sizeof(float));
      break;
  }
}

/* Fill the buffers for one checked run; returns the expected result in `expected` (recv elements). */
static void init_data(int in_place, float *send, float *recv, float *expected, size_t sendc, size_t recvc,
                      size_t param, int root, int rep) {
  float *input = in_place ? recv : send;
  memset(recv, 0, (sendc > recvc ? sendc : recvc) * sizeof(float));
  switch (coll) {
    case ALL_REDUCE:
      for (size_t j = 0; j < sendc; j++) input[j] = input_value(rank, j, rep);
      for (size_t j = 0; j < recvc; j++) {
        float sum = 0.0f;
        for (int r = 0; r < nranks; r++) sum += input_value(r, j, rep);
        expected[j] = sum;
      }
      break;
    case ALL_GATHER:
      if (in_place) input = recv + (size_t)rank * param;
      for (size_t j = 0; j < sendc; j++) input[j] = input_value(rank, j, rep);
      for (int r = 0; r < nranks; r++)
        for (size_t j = 0; j < param; j++) expected[(size_t)r * param + j] = input_value(r, j, rep);
      break;
    case REDUCE_SCATTER: /* MPI_Reduce_scatter_block leaves the in-place result at the start of recv */
      for (size_t j = 0; j < sendc; j++) input[j] = input_value(rank, j, rep);
      for (size_t j = 0; j < recvc; j++) {
        float sum = 0.0f;
        for (int r = 0; r < nranks; r++) sum += input_value(r, (size_t)rank * param + j, rep);
        expected[j] = sum;
      }
      break;
    case ALLTOALL: /* block p of rank r goes to rank p, where it lands as block r */
      for (size_t j = 0; j < sendc; j++) input[j] = input_value(rank, j, rep);
      for (int p = 0; p < nranks; p++)
        for (size_t j = 0; j < param; j++)
          expected[(size_t)p * param + j] = input_value(p, (size_t)rank * param + j, rep);
      break;
    case BROADCAST:
      if (rank == root)
        for (size_t j = 0; j < sendc; j++) input[j] = input_value(rank, j, rep);
      for (size_t j = 0; j < recvc; j++) expected[j] = input_value(root, j, rep);
      break;
  }
}

static void fail_now(void) {
  fflush(stdout);
  fflush(stderr);
  usleep(300 * 1000); /* let the launcher forward what rank 0 printed before the job is torn down */
  if (strcmp(fail_mode, "kill") == 0) raise(SIGKILL);
  if (strcmp(fail_mode, "hang") == 0)
    for (;;) pause();
  exit(3);
}

static double reduce_time(double t) {
  double out = t;
  switch (average) {
    case 0: MPI_Bcast(&out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case 2: MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD); break;
    case 3: MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); break;
    default:
      MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      out /= nranks;
      break;
  }
  return out;
}

struct bufs {
  float *send, *recv, *expected;
};

static int errors = 0; /* (size, placement) runs where this rank saw wrong elements */
static double bw_sum = 0.0;
static int bw_count = 0;

/* One placement of one size: time it, check it, print its columns (nccl-tests' BenchTime). */
static void bench(struct bufs *b, size_t count, int in_place, int root) {
  static int rep = 0;
  size_t sendc, recvc, param;
  coll_counts(count, &sendc, &recvc, &param);

  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int it = 0; it < iters; it++)
    for (int a = 0; a < agg_iters; a++) run_coll(in_place, b->send, b->recv, param, root);
  double sec = reduce_time((MPI_Wtime() - start) / ((double)iters * agg_iters));

  double size = (double)(sendc > recvc ? sendc : recvc) * sizeof(float);
  double algbw = sec > 0 ? size / 1.0e9 / sec : 0.0;
  double busbw = algbw * busbw_factor();

  int report_errors = datacheck && !(coll == ALLTOALL && in_place); /* nccl-tests: no in-place alltoall check */
  long long wrong = 0;
  rep++;
  for (int c = 0; c < datacheck; c++) {
    init_data(in_place, b->send, b->recv, b->expected, sendc, recvc, param, root, rep);
    run_coll(in_place, b->send, b->recv, param, root);
    long long local = 0;
    for (size_t j = 0; j < recvc; j++) local += b->recv[j] != b->expected[j];
    if (report_errors && local) errors++;
    MPI_Allreduce(&local, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (wrong) break;
  }

  char time_str[32], alg_str[32], bus_str[32];
  float_str(sec * 1.0e6, 7, time_str);
  float_str(algbw, 6, alg_str);
  float_str(busbw, 6, bus_str);
  if (rank == 0) {
    if (report_errors) printf("  %7s  %6s  %6s  %6g", time_str, alg_str, bus_str, (double)wrong);
    else printf("  %7s  %6s  %6s    N/A", time_str, alg_str, bus_str);
  }
  bw_sum += busbw;
  bw_count++;
}

static void time_test(struct bufs *b, const char *op_name, int root) {
  static int rows = 0;
  size_t sendc, recvc, param;
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t warm_size = maxBytes;; warm_size = minBytes) { /* warm-up at the largest, then the smallest size */
    coll_counts(warm_size / sizeof(float), &sendc, &recvc, &param);
    for (int it = 0; it < warmup_iters; it++) run_coll(0, b->send, b->recv, param, root);
    if (warm_size == minBytes) break;
  }
  for (size_t size = minBytes; size <= maxBytes; size = stepFactor > 1 ? size * stepFactor : size + stepBytes) {
    size_t count = size / sizeof(float);
    coll_counts(count, &sendc, &recvc, &param);
    if (rank == 0)
      printf("%12li  %12li  %8s  %6s  %6i", (long)((sendc > recvc ? sendc : recvc) * sizeof(float)), (long)param,
             "float", op_name, root);
    bench(b, count, 0, root);
    bench(b, count, 1, root);
    if (rank == 0) printf("\n");
    if (++rows == 1) { /* the first row is out: a fault test can fail now */
      fflush(stdout);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == fail_rank) fail_now();
    }
    if (size == 0 || (stepFactor <= 1 && stepBytes == 0)) break;
  }
}

static void host_name(char *out, int len) {
  if (gethostname(out, len) != 0) snprintf(out, len, "unknown");
  out[len - 1] = '\0';
  char *dot = strchr(out, '.');
  if (dot) *dot = '\0';
}

int main(int argc, char *argv[]) {
  setlinebuf(stdout);
  const char *prog = base_name(argv[0]);

  coll = -1;
  for (int c = 0; c < NCOLL; c++) {
    char perf[64], perf_mpi[64];
    snprintf(perf, sizeof(perf), "%s_perf", coll_names[c]);
    snprintf(perf_mpi, sizeof(perf_mpi), "%s_perf_mpi", coll_names[c]);
    if (strcmp(prog, perf) == 0 || strcmp(prog, perf_mpi) == 0) coll = c;
  }
  if (coll < 0) {
    fprintf(stderr, "nccl-tests stand-in: cannot tell the collective from the program name '%s': install it as "
                    "all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf or broadcast_perf\n",
            prog);
    return 2;
  }

  static struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},     {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},    {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},        {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},           {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},         {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'},  {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},    {"report_cputime", required_argument, 0, 'C'},
      {"average", required_argument, 0, 'a'},      {"local_register", required_argument, 0, 'R'},
      {"output_file", required_argument, 0, 'J'},  {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *op = "sum", *dtype = "float";
  int json_asked = 0;
  double parsed;
  for (;;) {
    int c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:hG:C:a:R:J:u:", longopts, NULL);
    if (c == -1) break;
    switch (c) {
      case 't': nThreads = (int)strtol(optarg, NULL, 0); break;
      case 'g': nGpus = (int)strtol(optarg, NULL, 0); break;
      case 'b':
      case 'e':
        parsed = parse_size(optarg);
        if (parsed < 0) {
          fprintf(stderr, "invalid size specified for '%s'\n", c == 'b' ? "minbytes" : "maxbytes");
          return -1;
        }
        if (c == 'b') minBytes = (size_t)parsed;
        else maxBytes = (size_t)parsed;
        break;
      case 'i': stepBytes = strtol(optarg, NULL, 0); break;
      case 'f': stepFactor = strtol(optarg, NULL, 0); break;
      case 'n': iters = (int)strtol(optarg, NULL, 0); break;
      case 'm': agg_iters = (int)strtol(optarg, NULL, 0); break;
      case 'w': warmup_iters = (int)strtol(optarg, NULL, 0); break;
      case 'N': run_cycles = (int)strtol(optarg, NULL, 0); break;
      case 'c': datacheck = (int)strtol(optarg, NULL, 0); break;
      case 'o': op = optarg; break;
      case 'd': dtype = optarg; break;
      case 'r': root_arg = (int)strtol(optarg, NULL, 0); break;
      case 'a': average = (int)strtol(optarg, NULL, 0); break;
      case 'C': report_cputime = (int)strtol(optarg, NULL, 0); break;
      case 'G': graph_launches = (int)strtol(optarg, NULL, 0); break;
      case 'J': json_asked = 1; break;
      case 'p': case 'z': case 'y': case 'T': case 'R': case 'u': break; /* accepted, no effect on a CPU */
      case 'h':
      default:
        if (c != 'h') printf("invalid option '%c'\n", c);
        usage(prog);
        return 0; /* as nccl-tests */
    }
  }
  if (minBytes > maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n", (unsigned long long)minBytes,
            (unsigned long long)maxBytes);
    return -1;
  }
  const char *bad = NULL;
  char why[256];
  if (nGpus != 1) {
    snprintf(why, sizeof(why), "-g %d: there is one CPU stand-in device per MPI rank; use -g 1 and one rank per "
                               "device (mpirun -np N / srun -n N)", nGpus);
    bad = why;
  } else if (nThreads != 1) {
    snprintf(why, sizeof(why), "-t %d: one thread per rank only", nThreads);
    bad = why;
  } else if (strcmp(dtype, "float") != 0) {
    snprintf(why, sizeof(why), "-d %s: only float is supported", dtype);
    bad = why;
  } else if (strcmp(op, "sum") != 0 && (coll == ALL_REDUCE || coll == REDUCE_SCATTER)) {
    snprintf(why, sizeof(why), "-o %s: only sum is supported", op);
    bad = why;
  } else if (iters < 1 || agg_iters < 1 || warmup_iters < 0 || datacheck < 0 || run_cycles < 0) {
    snprintf(why, sizeof(why), "-n and -m must be at least 1, -w, -c and -N at least 0");
    bad = why;
  } else if (maxBytes / sizeof(float) > (size_t)INT_MAX) {
    snprintf(why, sizeof(why), "-e %zu: at most %zu bytes (MPI int counts)", maxBytes, (size_t)INT_MAX * 4);
    bad = why;
  }
  if (bad) {
    fprintf(stderr, "nccl-tests stand-in %s: %s\n", prog, bad);
    return 2;
  }

  const char *env = getenv("STANDIN_FAIL_RANK");
  fail_mode = getenv("STANDIN_FAIL_MODE");
  if (env && *env) {
    fail_rank = atoi(env);
    if (!fail_mode || (strcmp(fail_mode, "exit") && strcmp(fail_mode, "kill") && strcmp(fail_mode, "hang"))) {
      fprintf(stderr, "nccl-tests stand-in: STANDIN_FAIL_MODE must be exit, kill or hang (got '%s')\n",
              fail_mode ? fail_mode : "");
      return 2;
    }
  }

  standin_init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  int root = coll == BROADCAST ? root_arg : -1;
  if (coll == BROADCAST && (root_arg < -1 || root_arg >= nranks)) {
    if (rank == 0) fprintf(stderr, "nccl-tests stand-in %s: -r %d: no such rank (%d ranks)\n", prog, root_arg,
                           nranks);
    MPI_Finalize();
    return 2;
  }
  if (json_asked && rank == 0) fprintf(stderr, "nccl-tests stand-in: -J ignored, no JSON output is written\n");

  /* the device lines: rank, pid, host and the index of this rank among the ranks of its host */
  char host[256];
  host_name(host, sizeof(host));
  char *hosts = malloc((size_t)nranks * 256);
  char mine[256];
  snprintf(mine, sizeof(mine), "%s", host);
  MPI_Allgather(mine, 256, MPI_CHAR, hosts, 256, MPI_CHAR, MPI_COMM_WORLD);
  int local_rank = 0;
  for (int p = 0; p < rank; p++) local_rank += strcmp(hosts + (size_t)p * 256, mine) == 0;
  free(hosts);

  char line[MAX_LINE];
  snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n", rank, 0,
           (int)getpid(), host, local_rank, 0, "CPU stand-in");
  char *lines = rank == 0 ? malloc((size_t)nranks * MAX_LINE) : NULL;
  MPI_Gather(line, MAX_LINE, MPI_CHAR, lines, MAX_LINE, MPI_CHAR, 0, MPI_COMM_WORLD);

  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\r\n")] = '\0';
    printf("%s\n", STANDIN_BANNER);
    printf("# stand-in MPI library: %s\n", lib);
    printf("# Collective test starting: %s\n", prog);
    printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
           "validation: %d graph: %d unalign: %d\n",
           nThreads, nGpus, minBytes, maxBytes, stepFactor > 1 ? stepFactor : stepBytes,
           stepFactor > 1 ? "factor" : "bytes", warmup_iters, iters, agg_iters, datacheck, graph_launches, 0);
    printf("#\n");
    printf("# Using devices\n");
    for (int p = 0; p < nranks; p++) printf("%s", lines + (size_t)p * MAX_LINE);
    free(lines);
    const char *time_label = report_cputime ? "cputime" : "time";
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
           "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type",
           "redop", "root", time_label, "algbw", "busbw", "#wrong", time_label, "algbw", "busbw", "#wrong", 0, "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "",
           "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, "");
  }

  /* buffers for the largest size: send, recv (which also holds in-place input) and the expected result */
  size_t sendc, recvc, param;
  coll_counts(maxBytes / sizeof(float), &sendc, &recvc, &param);
  size_t elems = (sendc > recvc ? sendc : recvc) + 1;
  struct bufs b = {malloc(elems * sizeof(float)), malloc(elems * sizeof(float)), malloc(elems * sizeof(float))};
  if (!b.send || !b.recv || !b.expected) {
    fprintf(stderr, "nccl-tests stand-in: rank %d cannot allocate 3 x %zu bytes: %s\n", rank,
            elems * sizeof(float), strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(b.send, 0, elems * sizeof(float));
  memset(b.recv, 0, elems * sizeof(float));

  const char *op_name = (coll == ALL_REDUCE || coll == REDUCE_SCATTER) ? "sum" : "none";
  for (long cycle = 0; run_cycles == 0 || cycle < run_cycles; cycle++) {
    if (coll == BROADCAST && root_arg == -1)
      for (int r = 0; r < nranks; r++) time_test(&b, op_name, r);
    else time_test(&b, op_name, root);
  }

  int total_errors = 0;
  MPI_Allreduce(&errors, &total_errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const char *min_bw = getenv("NCCL_TESTS_MIN_BW");
  double check_avg_bw = min_bw ? atof(min_bw) : -1;
  double avg = bw_count ? bw_sum / bw_count : 0.0;
  if (rank == 0) {
    printf("# %-20s : %d %s\n", "Out of bounds values", total_errors, total_errors ? "FAILED" : "OK");
    printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg,
           check_avg_bw == -1 ? "" : (avg < check_avg_bw * 0.9 ? "FAILED" : "OK"));
    printf("#\n");
    printf("# Collective test concluded: %s\n", prog);
    printf("\n");
    printf("#\n");
  }
  free(b.send);
  free(b.recv);
  free(b.expected);
  MPI_Finalize();
  return (total_errors || avg < check_avg_bw * 0.9) ? EXIT_FAILURE : EXIT_SUCCESS;
}
