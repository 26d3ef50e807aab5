/* A GPU communicator's side of the progress engine; see proxy.h. */
#include <stdlib.h>

#include "../exec/engine.h"
#include "../vendor/vendor.h"
#include "api_priv.h"
#include "proxy.h"

struct hc_proxy {
  struct hetcclComm *comm;
  const struct hc_dev_ops *dev;
  struct hc_gpu_lanes *lanes;
  struct hc_engine_comm *engine;
  struct hc_plan plan;  /* the call being enqueued; its scratch pools are the comm's */
  uint64_t *xfer_end;   /* 2 * nranks, hc_gpu_prepare's */
  uint64_t *window_end; /* 2 * nranks: window pieces handed out, for the engine's watch */
  int32_t *peer_pid;    /* per peer: its pid where it shares this host */
  uint32_t next_seq;
};

/* The engine's failure path calls this (on its thread): the comm's async
 * error, and its connections closed so that every other rank learns. */
static void engine_failed(void *arg, hc_result_t r) {
  struct hc_proxy *px = arg;
  hc_comm_fail(px->comm, r);
}

hc_result_t hc_proxy_create(struct hetcclComm *comm, struct hc_proxy **out) {
  hc_result_t r;
  struct hc_proxy *px;
  *out = NULL;
  const enum hc_mem_kind kind = comm->config.device_kind;
  if (!hc_dev_caps(kind).stream_mem_ops)
    return HC_FAIL(HC_ERR_DEVICE,
                   "rank %d: %s: the driver offers no 64-bit stream memory operations, which GPU "
                   "communicators need (CUDA 11.7 or later on a device that supports them)",
                   comm->rank, hc_dev_get(kind)->name);
  HC_TRY(hc_calloc(&px, 1, sizeof(*px), "proxy"));
  px->comm = comm;
  px->plan = (struct hc_plan){.pool = comm->plan.pool, .dev_pool = comm->plan.dev_pool, .mem = kind};
  px->dev = hc_dev_get(kind);
  const size_t n = (size_t)comm->nranks;
  HC_TRY_GOTO(hc_calloc(&px->xfer_end, 2 * n, sizeof(uint64_t), "proxy counters"), r, fail);
  HC_TRY_GOTO(hc_calloc(&px->window_end, 2 * n, sizeof(uint64_t), "proxy counters"), r, fail);
  HC_TRY_GOTO(hc_calloc(&px->peer_pid, n, sizeof(int32_t), "peer pids"), r, fail);
  for (int i = 0; i < comm->nranks; i++)
    if (i != comm->rank && comm->peers[i].net.host == comm->peers[comm->rank].net.host)
      px->peer_pid[i] = comm->peers[i].pid;
  HC_TRY_GOTO(hc_dev_set_device(px->dev, comm->config.device_id), r, fail);
  HC_TRY_GOTO(hc_gpu_lanes_create(px->dev, comm->config.device_id, comm->rank, comm->nranks, comm->plan_ctx.chunk_bytes,
                                  &px->lanes),
              r, fail);
  hc_gpu_lanes_use_vendor(px->lanes, comm->vendor, comm->group_vendor_comm);
  hc_gpu_lanes_allow_programs(px->lanes, comm->gpu_time_sliced ? 0 : (size_t)hc_param_int(HC_P_GPU_PROGRAM_BYTES));
  /* Compile and load the reduction kernels now, while nothing of ours is
   * in flight: loading a module can wait for every stream of the context. */
  hc_stream_t warm_stream = NULL;
  float *probe = NULL;
  r = hc_dev_stream_create(px->dev, comm->config.device_id, &warm_stream);
  if (r == HC_OK) r = hc_dev_host_alloc(px->dev, sizeof(*probe), (void **)&probe);
  if (r == HC_OK) {
    *probe = 0;
    struct hc_reduce_args warm = {
        .dst = probe, .src0 = probe, .src1 = probe, .count = 1, .dtype = HC_FLOAT32, .op = HC_SUM};
    r = hc_dev_reduce(px->dev, &warm, warm_stream);
    if (r == HC_OK) r = hc_dev_stream_sync(px->dev, warm_stream);
  }
  if (probe) hc_dev_host_free(px->dev, probe);
  if (warm_stream) hc_dev_stream_destroy(px->dev, warm_stream);
  if (r != HC_OK) goto fail;
  const struct hc_engine_desc desc = {.links = &comm->links,
                                      .windows = comm->plan_ctx.windows,
                                      .peer_pid = px->peer_pid,
                                      .lanes = px->lanes,
                                      .vendor = comm->vendor,
                                      .vendor_comm = comm->group_vendor_comm,
                                      .active_calls = &comm->active_calls,
                                      .fail = engine_failed,
                                      .arg = px};
  HC_TRY_GOTO(hc_engine_register(&desc, &px->engine), r, fail);
  *out = px;
  return HC_OK;
fail:
  hc_proxy_destroy(px);
  return r;
}

/* Plans the calls and splits the plan: the transfers go to the engine
 * first, then the local steps go on the lanes. */
static hc_result_t submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls, hc_stream_t *streams,
                          int nstreams) {
  struct hetcclComm *comm = px->comm;
  const struct hc_plan_ctx *x = &comm->plan_ctx;
  struct hc_engine_job *job = NULL;
  hc_result_t r = HC_OK;
  HC_TRACE(HC_EXEC, "proxy: call %u submitted", px->next_seq + 1);
  for (int i = 0; i < ncalls && r == HC_OK; i++) r = hc_plan_add(&px->plan, x, &calls[i]);
  if (r == HC_OK) r = hc_plan_stage(&px->plan, x, comm->stage_device);
  if (r == HC_OK) r = hc_calloc(&job, 1, sizeof(*job), "an engine job");
  if (r == HC_OK) {
    job->host.mem = HC_MEM_HOST;
    r = hc_gpu_prepare(px->lanes, &px->plan, &job->host, px->xfer_end);
  }
  if (r != HC_OK) {
    hc_engine_job_free(job);
    hc_plan_clear(&px->plan);
    return r;
  }
  HC_TRACE(HC_EXEC, "proxy: call %u planned: %d steps, %d of them the engine's", px->next_seq + 1, px->plan.nsteps,
           job->host.nsteps);
  job->seq = ++px->next_seq;
  const uint32_t seq = job->seq;
  if (job->host.nsteps == 0) { /* windows and the GPU only */
    hc_engine_job_free(job);
  } else if ((r = hc_engine_submit(px->engine, job)) != HC_OK) {
    hc_plan_clear(&px->plan);
    return r;
  }
  /* The engine watches the window waits before the streams may block on
   * them (a host reduction fallback waits for the stream in enqueue). */
  for (int peer = 0; x->windows && peer < x->nranks; peer++) {
    px->window_end[2 * peer] = x->windows[peer].tx_pieces;
    px->window_end[2 * peer + 1] = x->windows[peer].rx_pieces;
  }
  hc_engine_expect_sigs(px->engine, &px->plan);
  hc_engine_expect(px->engine, px->window_end);
  r = hc_gpu_enqueue(px->lanes, &px->plan, streams, nstreams);
  hc_plan_clear(&px->plan);
  HC_TRACE(HC_EXEC, "proxy: call %u enqueued", seq);
  return r;
}

hc_result_t hc_proxy_submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls, hc_stream_t *streams,
                            int nstreams) {
  struct hetcclComm *comm = px->comm;
  for (int i = 0; i < nstreams; i++) {
    bool capturing = false;
    HC_TRY(hc_dev_stream_capturing(px->dev, streams[i], &capturing));
    if (capturing)
      return HC_FAIL(HC_ERR_USAGE,
                     "rank %d: hetccl collectives cannot be captured in a CUDA graph yet; "
                     "run them outside the capture",
                     comm->rank);
  }
  if (atomic_load(&comm->async_error) != HC_OK)
    return HC_FAIL(HC_ERR_REMOTE, "rank %d: the communicator failed earlier (%s); abort or destroy it", comm->rank,
                   comm->async_error_text);
  hc_result_t r = submit(px, calls, ncalls, streams, nstreams);
  /* Window pieces and counter positions were handed out for steps that
   * may never be enqueued: the comm cannot go on. */
  if (r != HC_OK) hc_comm_set_async_error(comm, r);
  return r;
}

hc_result_t hc_proxy_drain_blocking(struct hc_proxy *px) {
  const uint64_t deadline = hc_deadline_ns();
  HC_TRY(hc_engine_drain(px->engine, deadline));
  return hc_gpu_lanes_wait_idle(px->lanes, deadline);
}

bool hc_proxy_destroy(struct hc_proxy *px) {
  bool vendor_aborted = false;
  if (px == NULL) return false;
  /* Queued calls run first (each wait bounded by HETCCL_TIMEOUT); after a
   * failure the streams are released until they drain. */
  hc_engine_unregister(px->engine, &vendor_aborted);
  hc_gpu_lanes_destroy(px->lanes);
  hc_plan_reset(&px->plan);
  free(px->xfer_end);
  free(px->window_end);
  free(px->peer_pid);
  free(px);
  return vendor_aborted;
}
