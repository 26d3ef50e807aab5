/* The proxy thread of a GPU communicator; see proxy.h for the hand-off. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "api_priv.h"
#include "proxy.h"

#define HC_PROXY_RING 1024 /* ready flags: calls that may be in flight at once */
#define HC_PROXY_SPIN_NS 2000000ull

/* The calls of one group on this comm. The plan is built when the job
 * runs, so the plans of calls in flight never hold scratch at once. */
struct proxy_job {
  struct hc_coll_args *calls;
  int ncalls;
  size_t *v_arrays; /* alltoallv: copies of the count arrays */
  uint32_t seq;
  struct proxy_job *next;
};

static void job_free(struct proxy_job *job) {
  free(job->calls);
  free(job->v_arrays);
  free(job);
}

/* Copies calls (and their alltoallv arrays, which the caller may reuse). */
static hc_result_t job_new(const struct hc_coll_args *calls, int ncalls, int nranks, struct proxy_job **out) {
  struct proxy_job *job;
  *out = NULL;
  HC_TRY(hc_calloc(&job, 1, sizeof(*job), "proxy job"));
  int nv = 0;
  for (int i = 0; i < ncalls; i++) nv += calls[i].coll == HC_COLL_ALLTOALLV;
  job->calls = malloc((size_t)ncalls * sizeof(*calls));
  job->v_arrays = nv ? malloc((size_t)nv * 4 * (size_t)nranks * sizeof(size_t)) : NULL;
  if (job->calls == NULL || (nv && job->v_arrays == NULL)) {
    job_free(job);
    return HC_FAIL(HC_ERR_SYSTEM, "proxy: out of host memory for a job of %d calls", ncalls);
  }
  memcpy(job->calls, calls, (size_t)ncalls * sizeof(*calls));
  job->ncalls = ncalls;
  size_t *store = job->v_arrays;
  for (int i = 0; i < ncalls; i++) {
    if (job->calls[i].coll != HC_COLL_ALLTOALLV) continue;
    hc_coll_args_keep_counts(&job->calls[i], nranks, store);
    store += 4 * (size_t)nranks;
  }
  *out = job;
  return HC_OK;
}

struct hc_proxy {
  struct hetcclComm *comm;
  const struct hc_dev_ops *dev;
  int device;
  hc_stream_t streams[HC_LANE_COUNT]; /* the plans' local steps run here */
  uint32_t *flags;    /* pinned: [0..RING) ready slots, [RING] done */
  uint32_t next_seq;  /* caller side: the last seq handed out */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t lock;
  pthread_cond_t wake, idle;
  struct proxy_job *head, *tail;
  bool busy, stop;
  uint64_t spin_ns; /* how long the thread looks for work before it sleeps */
  struct hc_plan plan; /* the running job's; its scratch pools are the comm's */
};

static volatile uint32_t *ready_flag(struct hc_proxy *px, uint32_t seq) { return &px->flags[seq % HC_PROXY_RING]; }
static volatile uint32_t *done_flag(struct hc_proxy *px) { return &px->flags[HC_PROXY_RING]; }

/* Waits until the caller's stream has reached the call: its inputs are ready. */
static hc_result_t wait_ready(struct hc_proxy *px, uint32_t seq) {
  uint64_t deadline = hc_deadline_ns();
  const _Atomic uint32_t *flag = (const _Atomic uint32_t *)ready_flag(px, seq);
  for (unsigned spins = 0; atomic_load_explicit(flag, memory_order_acquire) != seq; spins++) {
    if (atomic_load(&px->comm->abort_flag))
      return HC_FAIL(HC_ERR_REMOTE, "rank %d: aborted while waiting for the stream", px->comm->rank);
    if (hc_now_ns() > deadline)
      return HC_FAIL(HC_ERR_REMOTE, "rank %d: the caller's stream did not reach call %u within HETCCL_TIMEOUT",
                     px->comm->rank, seq);
    if (spins > 1000) nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    else sched_yield();
  }
  return HC_OK;
}

static void release_stream(struct hc_proxy *px, uint32_t seq) {
  atomic_store_explicit((_Atomic uint32_t *)done_flag(px), seq, memory_order_release);
}

/* Builds the job's plan and runs it on the proxy's stream. */
static hc_result_t run_job(struct hc_proxy *px, const struct proxy_job *job) {
  struct hetcclComm *comm = px->comm;
  struct hc_plan *plan = &px->plan;
  hc_result_t r = HC_OK;
  plan->mem = comm->config.device_kind;
  for (int i = 0; i < job->ncalls && r == HC_OK; i++) r = hc_plan_add(plan, &comm->plan_ctx, &job->calls[i]);
  if (r == HC_OK) r = hc_plan_stage(plan, &comm->plan_ctx, true);
  HC_TRACE(HC_EXEC, "proxy: job %u planned, %d steps", job->seq, plan->nsteps);
  if (r == HC_OK) r = wait_ready(px, job->seq);
  HC_TRACE(HC_EXEC, "proxy: job %u: the stream is there", job->seq);
  if (r == HC_OK) {
    struct hc_exec_job ej = {.links = &comm->links, .plan = plan};
    memcpy(ej.streams, px->streams, sizeof(ej.streams));
    /* Done means every step's event has fired: the streams are idle. */
    r = hc_exec_run_blocking(&ej, 1, hc_deadline_ns());
  }
  hc_plan_reset(plan);
  return r;
}

static void *proxy_main(void *arg) {
  struct hc_proxy *px = arg;
  hc_log_set_rank(px->comm->rank);
  hc_result_t failed = px->dev->set_device(px->device);
  if (failed != HC_OK) hc_comm_set_async_error(px->comm, failed);
  pthread_mutex_lock(&px->lock);
  for (;;) {
    /* Calls tend to come in bursts: look for the next one a while before
     * sleeping, since a wake-up costs more than a small collective. */
    for (uint64_t until = hc_now_ns() + px->spin_ns; px->head == NULL && !px->stop && hc_now_ns() < until;) {
      pthread_mutex_unlock(&px->lock);
      sched_yield();
      pthread_mutex_lock(&px->lock);
    }
    while (px->head == NULL && !px->stop) pthread_cond_wait(&px->wake, &px->lock);
    if (px->head == NULL) break;
    struct proxy_job *job = px->head;
    px->head = job->next;
    if (px->head == NULL) px->tail = NULL;
    px->busy = true;
    pthread_mutex_unlock(&px->lock);

    hc_result_t r = atomic_load(&px->comm->async_error) != HC_OK ? HC_ERR_REMOTE : run_job(px, job);
    if (r != HC_OK) hc_comm_set_async_error(px->comm, r);
    /* Released even after a failure, or the GPU would wait forever; the
     * failure is the comm's async error, which callers poll. */
    release_stream(px, job->seq);
    HC_TRACE(HC_EXEC, "proxy: job %u released", job->seq);
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
  HC_TRY(hc_calloc(&px, 1, sizeof(*px), "proxy"));
  px->comm = comm;
  px->plan = (struct hc_plan){.pool = comm->plan.pool, .dev_pool = comm->plan.dev_pool};
  px->dev = hc_dev_get(comm->config.device_kind);
  px->spin_ns = comm->links.spin_ns ? HC_PROXY_SPIN_NS : 0;
  px->device = comm->config.device_id;
  pthread_mutex_init(&px->lock, NULL);
  pthread_cond_init(&px->wake, NULL);
  pthread_cond_init(&px->idle, NULL);
  HC_TRY_GOTO(px->dev->set_device(px->device), r, fail);
  for (int l = 0; l < HC_LANE_COUNT; l++) HC_TRY_GOTO(px->dev->stream_create(px->device, &px->streams[l]), r, fail);
  HC_TRY_GOTO(px->dev->host_alloc((HC_PROXY_RING + 1 + 16) * sizeof(uint32_t), (void **)&px->flags), r, fail);
  memset(px->flags, 0, (HC_PROXY_RING + 1 + 16) * sizeof(uint32_t));
  /* Compile and load the reduction kernels now, while no stream waits for
   * this proxy: loading a module can wait for every stream of the context,
   * and once calls are in flight the caller's stream waits for the proxy. */
  float *probe = (float *)&px->flags[HC_PROXY_RING + 1];
  struct hc_reduce_args warm = {.dst = probe, .src0 = probe, .src1 = probe, .count = 1, .dtype = HC_FLOAT32,
                                .op = HC_SUM};
  HC_TRY_GOTO(px->dev->reduce(&warm, px->streams[HC_LANE_MAIN]), r, fail);
  HC_TRY_GOTO(px->dev->stream_sync(px->streams[HC_LANE_MAIN]), r, fail);
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

hc_result_t hc_proxy_submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls,
                            hc_stream_t *streams, int nstreams) {
  const struct hc_dev_ops *dev = px->dev;
  for (int i = 0; i < nstreams; i++) {
    bool capturing = false;
    HC_TRY(dev->stream_capturing(streams[i], &capturing));
    if (capturing)
      return HC_FAIL(HC_ERR_USAGE, "rank %d: hetccl collectives cannot be captured in a CUDA graph yet; "
                     "run them outside the capture", px->comm->rank);
  }
  struct proxy_job *job;
  HC_TRY(job_new(calls, ncalls, px->comm->nranks, &job));
  uint32_t seq = ++px->next_seq;
  /* A ready slot is reused after HC_PROXY_RING calls: the proxy must have
   * passed it. */
  while (seq - atomic_load((_Atomic uint32_t *)done_flag(px)) >= HC_PROXY_RING) sched_yield();
  hc_result_t r;
  hc_stream_t main_stream = streams[0];
  hc_event_t ev = NULL;
  if (nstreams > 1) HC_TRY_GOTO(dev->event_create(&ev), r, fail);
  for (int i = 1; i < nstreams; i++) {
    HC_TRY_GOTO(dev->event_record(ev, streams[i]), r, fail);
    HC_TRY_GOTO(dev->stream_wait_event(main_stream, ev), r, fail);
  }
  HC_TRY_GOTO(dev->flag_write(main_stream, ready_flag(px, seq), seq), r, fail);
  HC_TRY_GOTO(dev->flag_wait(main_stream, done_flag(px), seq), r, fail);
  if (nstreams > 1) {
    HC_TRY_GOTO(dev->event_record(ev, main_stream), r, fail);
    for (int i = 1; i < nstreams; i++) HC_TRY_GOTO(dev->stream_wait_event(streams[i], ev), r, fail);
  }
  if (ev) dev->event_destroy(ev);
  job->seq = seq;
  pthread_mutex_lock(&px->lock);
  if (px->tail) px->tail->next = job;
  else px->head = job;
  px->tail = job;
  pthread_cond_signal(&px->wake);
  pthread_mutex_unlock(&px->lock);
  return HC_OK;
fail:
  if (ev) dev->event_destroy(ev);
  job_free(job);
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
  return HC_OK;
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
  /* Plans never run: release their streams so no GPU waits forever. */
  for (struct proxy_job *job = px->head, *next; job; job = next) {
    next = job->next;
    release_stream(px, job->seq);
    job_free(job);
  }
  for (int l = 0; l < HC_LANE_COUNT; l++) {
    if (px->streams[l] == NULL) continue;
    px->dev->stream_sync(px->streams[l]);
    px->dev->stream_destroy(px->streams[l]);
  }
  if (px->flags) px->dev->host_free(px->flags);
  pthread_cond_destroy(&px->wake);
  pthread_cond_destroy(&px->idle);
  pthread_mutex_destroy(&px->lock);
  free(px);
}
