/* The proxy thread of a GPU communicator; see proxy.h for the hand-off. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "../exec/enqueue.h"
#include "api_priv.h"
#include "proxy.h"

#define HC_PROXY_SPIN_NS 2000000ull

/* The transfers of one call (or group) on this comm, and where its
 * counters end, to release the streams if it fails. */
struct proxy_job {
  struct hc_plan host;
  uint64_t *xfer_end;   /* 2 * nranks: queue counters */
  uint64_t *window_end; /* 2 * nranks: per peer, pieces sent and received through its window */
  uint32_t seq;
  struct proxy_job *next;
};

static void job_free(struct proxy_job *job) {
  if (job == NULL) return;
  hc_plan_reset(&job->host);
  free(job->xfer_end);
  free(job->window_end);
  free(job);
}

struct hc_proxy {
  struct hetcclComm *comm;
  const struct hc_dev_ops *dev;
  struct hc_gpu_lanes *lanes;
  struct hc_plan plan; /* the call being enqueued; its scratch pools are the comm's */
  struct proxy_job *spare; /* a call without transfers leaves its job here for the next */
  uint32_t next_seq;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t lock;
  pthread_cond_t wake, idle;
  struct proxy_job *head, *tail;
  bool busy, stop;
  atomic_bool queued; /* head != NULL, for the thread to look at without the lock */
  uint64_t spin_ns;   /* how long the thread looks for work before it sleeps */
};

/* After a failure: every counter a stream of this rank may wait on moves
 * past what the job's steps wait for (job NULL: every step enqueued so
 * far; the calling thread's), so the caller's streams complete (with
 * wrong data; the comm's async error says so) rather than hang. */
static void release_streams(struct hc_proxy *px, const struct proxy_job *job) {
  const struct hc_plan_ctx *x = &px->comm->plan_ctx;
  hc_gpu_lanes_release(px->lanes, job ? job->xfer_end : NULL);
  for (int peer = 0; x->windows && peer < x->nranks; peer++) {
    const struct hc_plan_window *w = &x->windows[peer];
    if (w->w.bytes == 0) continue;
    atomic_ullong *waited[2] = {w->w.tx_freed, w->w.rx_filled};
    const uint64_t sent = job ? job->window_end[2 * peer] : w->tx_pieces;
    const uint64_t got = job ? job->window_end[2 * peer + 1] : w->rx_pieces;
    const uint64_t end[2] = {sent, got};
    for (int d = 0; d < 2; d++)
      if (atomic_load(waited[d]) < end[d]) atomic_store(waited[d], end[d]);
  }
}

static void *proxy_main(void *arg) {
  struct hc_proxy *px = arg;
  struct hetcclComm *comm = px->comm;
  hc_log_set_rank(comm->rank);
  pthread_mutex_lock(&px->lock);
  for (;;) {
    /* Calls tend to come in bursts: look for the next one a while before
     * sleeping, since a wake-up costs more than a small collective. */
    if (px->head == NULL && !px->stop && px->spin_ns) {
      pthread_mutex_unlock(&px->lock);
      for (uint64_t until = hc_now_ns() + px->spin_ns;
           !atomic_load_explicit(&px->queued, memory_order_acquire) && hc_now_ns() < until;)
        sched_yield();
      pthread_mutex_lock(&px->lock);
    }
    while (px->head == NULL && !px->stop) pthread_cond_wait(&px->wake, &px->lock);
    if (px->head == NULL) break;
    struct proxy_job *job = px->head;
    px->head = job->next;
    if (px->head == NULL) px->tail = NULL;
    atomic_store(&px->queued, px->head != NULL);
    px->busy = true;
    pthread_mutex_unlock(&px->lock);

    hc_result_t r = HC_ERR_REMOTE;
    if (atomic_load(&comm->async_error) == HC_OK) {
      struct hc_exec_job ej = {.links = &comm->links, .plan = &job->host};
      r = hc_exec_run_blocking(&ej, 1, hc_deadline_ns());
    }
    if (r != HC_OK) {
      hc_comm_set_async_error(comm, r);
      release_streams(px, job);
    }
    HC_TRACE(HC_EXEC, "proxy: job %u done (%d)", job->seq, (int)r);
    job_free(job);

    pthread_mutex_lock(&px->lock);
    px->busy = false;
    pthread_cond_broadcast(&px->idle);
  }
  pthread_mutex_unlock(&px->lock);
  return NULL;
}

hc_result_t hc_proxy_create(struct hetcclComm *comm, struct hc_proxy **out) {
  hc_result_t r;
  struct hc_proxy *px;
  *out = NULL;
  const enum hc_mem_kind kind = comm->config.device_kind;
  if (!hc_dev_caps(kind).stream_mem_ops)
    return HC_FAIL(HC_ERR_DEVICE, "rank %d: %s: the driver offers no 64-bit stream memory operations, which GPU "
                   "communicators need (CUDA 11.7 or later on a device that supports them)",
                   comm->rank, hc_dev_get(kind)->name);
  HC_TRY(hc_calloc(&px, 1, sizeof(*px), "proxy"));
  px->comm = comm;
  px->plan = (struct hc_plan){.pool = comm->plan.pool, .dev_pool = comm->plan.dev_pool, .mem = kind};
  px->dev = hc_dev_get(kind);
  px->spin_ns = comm->links.spin_ns ? HC_PROXY_SPIN_NS : 0;
  pthread_mutex_init(&px->lock, NULL);
  pthread_cond_init(&px->wake, NULL);
  pthread_cond_init(&px->idle, NULL);
  HC_TRY_GOTO(px->dev->set_device(comm->config.device_id), r, fail);
  HC_TRY_GOTO(hc_gpu_lanes_create(px->dev, comm->config.device_id, comm->rank, comm->nranks,
                                  comm->plan_ctx.chunk_bytes, &px->lanes), r, fail);
  hc_gpu_lanes_use_vendor(px->lanes, comm->vendor, comm->group_vendor_comm);
  /* Compile and load the reduction kernels now, while nothing of ours is
   * in flight: loading a module can wait for every stream of the context. */
  hc_stream_t warm_stream = NULL;
  float *probe = NULL;
  r = px->dev->stream_create(comm->config.device_id, &warm_stream);
  if (r == HC_OK) r = px->dev->host_alloc(sizeof(*probe), (void **)&probe);
  if (r == HC_OK) {
    *probe = 0;
    struct hc_reduce_args warm = {.dst = probe, .src0 = probe, .src1 = probe, .count = 1, .dtype = HC_FLOAT32,
                                  .op = HC_SUM};
    r = px->dev->reduce(&warm, warm_stream);
    if (r == HC_OK) r = px->dev->stream_sync(warm_stream);
  }
  if (probe) px->dev->host_free(probe);
  if (warm_stream) px->dev->stream_destroy(warm_stream);
  if (r != HC_OK) goto fail;
  if (pthread_create(&px->thread, NULL, proxy_main, px) != 0) {
    r = HC_FAIL(HC_ERR_SYSTEM, "proxy: cannot start its thread: %s", strerror(errno));
    goto fail;
  }
  px->thread_started = true;
  *out = px;
  return HC_OK;
fail:
  hc_proxy_destroy(px);
  return r;
}

static hc_result_t job_new(struct hc_proxy *px, struct proxy_job **out) {
  struct proxy_job *job;
  const size_t n = 2 * (size_t)px->comm->nranks;
  *out = px->spare;
  px->spare = NULL;
  if (*out != NULL) return HC_OK;
  HC_TRY(hc_calloc(&job, 1, sizeof(*job), "proxy job"));
  job->host.mem = HC_MEM_HOST;
  job->xfer_end = calloc(n, sizeof(uint64_t));
  job->window_end = calloc(n, sizeof(uint64_t));
  if (job->xfer_end == NULL || job->window_end == NULL) {
    job_free(job);
    return HC_FAIL(HC_ERR_SYSTEM, "proxy: out of host memory for a job");
  }
  *out = job;
  return HC_OK;
}

/* Plans the calls and splits the plan: the transfers go to the proxy
 * thread first, then the local steps go on the lanes. */
static hc_result_t submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls, hc_stream_t *streams,
                          int nstreams) {
  struct hetcclComm *comm = px->comm;
  const struct hc_plan_ctx *x = &comm->plan_ctx;
  struct proxy_job *job = NULL;
  hc_result_t r = HC_OK;
  HC_TRACE(HC_EXEC, "proxy: call %u submitted", px->next_seq + 1);
  for (int i = 0; i < ncalls && r == HC_OK; i++) r = hc_plan_add(&px->plan, x, &calls[i]);
  if (r == HC_OK) r = hc_plan_stage(&px->plan, x, true);
  if (r == HC_OK) r = job_new(px, &job);
  if (r == HC_OK) r = hc_gpu_prepare(px->lanes, &px->plan, &job->host, job->xfer_end);
  if (r != HC_OK) {
    job_free(job);
    hc_plan_reset(&px->plan);
    return r;
  }
  HC_TRACE(HC_EXEC, "proxy: call %u planned: %d steps, %d of them the proxy's", px->next_seq + 1, px->plan.nsteps,
           job->host.nsteps);
  const uint32_t seq = ++px->next_seq;
  if (job->host.nsteps == 0) { /* windows and the GPU only */
    px->spare = job;
    job = NULL;
  }
  if (job != NULL) { /* the proxy's once queued */
    for (int peer = 0; x->windows && peer < x->nranks; peer++) {
      job->window_end[2 * peer] = x->windows[peer].tx_pieces;
      job->window_end[2 * peer + 1] = x->windows[peer].rx_pieces;
    }
    job->seq = seq;
    pthread_mutex_lock(&px->lock);
    if (px->tail) px->tail->next = job;
    else px->head = job;
    px->tail = job;
    atomic_store_explicit(&px->queued, true, memory_order_release);
    pthread_cond_signal(&px->wake);
    pthread_mutex_unlock(&px->lock);
  }
  r = hc_gpu_enqueue(px->lanes, &px->plan, streams, nstreams);
  hc_plan_reset(&px->plan);
  HC_TRACE(HC_EXEC, "proxy: call %u enqueued", seq);
  return r;
}

hc_result_t hc_proxy_submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls,
                            hc_stream_t *streams, int nstreams) {
  struct hetcclComm *comm = px->comm;
  for (int i = 0; i < nstreams; i++) {
    bool capturing = false;
    HC_TRY(px->dev->stream_capturing(streams[i], &capturing));
    if (capturing)
      return HC_FAIL(HC_ERR_USAGE, "rank %d: hetccl collectives cannot be captured in a CUDA graph yet; "
                     "run them outside the capture", comm->rank);
  }
  if (atomic_load(&comm->async_error) != HC_OK)
    return HC_FAIL(HC_ERR_REMOTE, "rank %d: the communicator failed earlier (%s); abort or destroy it",
                   comm->rank, comm->async_error_text);
  hc_result_t r = submit(px, calls, ncalls, streams, nstreams);
  /* Window pieces and counter positions were handed out for steps that
   * may never be enqueued: the comm cannot go on. */
  if (r != HC_OK) hc_comm_set_async_error(comm, r);
  return r;
}

hc_result_t hc_proxy_drain_blocking(struct hc_proxy *px) {
  uint64_t deadline = hc_deadline_ns();
  pthread_mutex_lock(&px->lock);
  while ((px->head != NULL || px->busy) && hc_now_ns() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&px->idle, &px->lock, &ts);
  }
  bool idle = px->head == NULL && !px->busy;
  pthread_mutex_unlock(&px->lock);
  if (!idle) return HC_FAIL(HC_ERR_REMOTE, "rank %d: work still pending after HETCCL_TIMEOUT", px->comm->rank);
  return hc_gpu_lanes_wait_idle(px->lanes, deadline);
}

void hc_proxy_destroy(struct hc_proxy *px) {
  if (px == NULL) return;
  if (px->thread_started) {
    pthread_mutex_lock(&px->lock);
    px->stop = true;
    pthread_cond_signal(&px->wake);
    pthread_mutex_unlock(&px->lock);
    pthread_join(px->thread, NULL);
  }
  /* Jobs never run, and steps on windows whose peer is gone: release the
   * streams that wait for them (a no-op after a drain). */
  for (struct proxy_job *job = px->head, *next; job; job = next) {
    next = job->next;
    job_free(job);
  }
  if (px->lanes) release_streams(px, NULL);
  hc_gpu_lanes_destroy(px->lanes);
  job_free(px->spare);
  hc_plan_reset(&px->plan);
  pthread_cond_destroy(&px->wake);
  pthread_cond_destroy(&px->idle);
  pthread_mutex_destroy(&px->lock);
  free(px);
}
