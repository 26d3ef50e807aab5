/*
 * net/ib: the part of libibverbs' interface this transport uses, declared
 * here by value (rdma-core's infiniband/verbs.h, ABI IBVERBS_1.1 and later)
 * so that hetccl builds without rdma-core and opens libibverbs.so.1 at run
 * time (DESIGN rule 1). Only fields this transport reads or writes are
 * named; the rest is padding of the same size. tests/unit/test_net_ib_layout.c
 * checks every offset and size against the real header wherever it is
 * installed.
 *
 * Enums of the real header are plain ints here (the C ABI gives an enum the
 * size of int when its values fit). The data-path calls of verbs.h
 * (ibv_post_send, ibv_post_recv, ibv_poll_cq) are inline functions that jump
 * through the context's ops table; ib_post_send() and friends below do the
 * same.
 */
#ifndef HC_NET_IB_VERBS_H_
#define HC_NET_IB_VERBS_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct ibv_device;
struct ibv_pd;
struct ibv_srq;

struct ibv_comp_channel {
  struct ibv_context *context;
  int fd, refcnt;
};

union ibv_gid {
  uint8_t raw[16];
  struct {
    uint64_t subnet_prefix, interface_id; /* big endian */
  } global;
};

struct ibv_cq;
struct ibv_qp;
struct ibv_wc;
struct ibv_send_wr;
struct ibv_recv_wr;

/* Only the three data-path slots are called; the others keep the offsets. */
struct ibv_context_ops {
  void *compat_head[7]; /* _compat_query_device .. _compat_dereg_mr */
  void *mw_ops[3];      /* alloc_mw, bind_mw, dealloc_mw */
  void *compat_create_cq;
  int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
  int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
  void *compat_mid[7]; /* _compat_cq_event .. _compat_destroy_srq */
  void *post_srq_recv;
  void *compat_qp[4]; /* _compat_create_qp .. _compat_destroy_qp */
  int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
  int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
  void *compat_tail[5]; /* _compat_create_ah .. _compat_async_event */
};

struct ibv_context {
  struct ibv_device *device;
  struct ibv_context_ops ops;
  int cmd_fd, async_fd, num_comp_vectors;
  /* pthread_mutex_t mutex; void *abi_compat; (not touched) */
};

/* IBV_PORT_ACTIVE, IBV_LINK_LAYER_*, IBV_MTU_* */
enum { HC_IBV_PORT_ACTIVE = 4 };
enum { HC_IBV_LINK_LAYER_UNSPECIFIED = 0, HC_IBV_LINK_LAYER_INFINIBAND = 1, HC_IBV_LINK_LAYER_ETHERNET = 2 };
enum { HC_IBV_MTU_256 = 1, HC_IBV_MTU_4096 = 5 };

struct ibv_port_attr {
  int state, max_mtu, active_mtu, gid_tbl_len;
  uint32_t port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr;
  uint16_t pkey_tbl_len, lid, sm_lid;
  uint8_t lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer,
      flags;
  uint16_t port_cap_flags2;
};

struct ibv_mr {
  struct ibv_context *context;
  struct ibv_pd *pd;
  void *addr;
  size_t length;
  uint32_t handle, lkey, rkey;
};

enum { HC_IBV_ACCESS_LOCAL_WRITE = 1, HC_IBV_ACCESS_REMOTE_WRITE = 2, HC_IBV_ACCESS_REMOTE_READ = 4 };

struct ibv_cq {
  struct ibv_context *context;
  struct ibv_comp_channel *channel;
  void *cq_context;
  uint32_t handle;
  int cqe;
  /* mutex, cond, event counters (not touched) */
};

struct ibv_qp {
  struct ibv_context *context;
  void *qp_context;
  struct ibv_pd *pd;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_srq *srq;
  uint32_t handle, qp_num;
  int state, qp_type;
  /* mutex, cond, events_completed (not touched) */
};

struct ibv_qp_cap {
  uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
};

enum { HC_IBV_QPT_RC = 2 };

struct ibv_qp_init_attr {
  void *qp_context;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_srq *srq;
  struct ibv_qp_cap cap;
  int qp_type, sq_sig_all;
};

struct ibv_global_route {
  union ibv_gid dgid;
  uint32_t flow_label;
  uint8_t sgid_index, hop_limit, traffic_class;
};

struct ibv_ah_attr {
  struct ibv_global_route grh;
  uint16_t dlid;
  uint8_t sl, src_path_bits, static_rate, is_global, port_num;
};

/* enum ibv_qp_state */
enum {
  HC_IBV_QPS_RESET,
  HC_IBV_QPS_INIT,
  HC_IBV_QPS_RTR,
  HC_IBV_QPS_RTS,
  HC_IBV_QPS_SQD,
  HC_IBV_QPS_SQE,
  HC_IBV_QPS_ERR
};
/* enum ibv_qp_attr_mask */
enum {
  HC_IBV_QP_STATE = 1 << 0,
  HC_IBV_QP_ACCESS_FLAGS = 1 << 3,
  HC_IBV_QP_PKEY_INDEX = 1 << 4,
  HC_IBV_QP_PORT = 1 << 5,
  HC_IBV_QP_AV = 1 << 7,
  HC_IBV_QP_PATH_MTU = 1 << 8,
  HC_IBV_QP_TIMEOUT = 1 << 9,
  HC_IBV_QP_RETRY_CNT = 1 << 10,
  HC_IBV_QP_RNR_RETRY = 1 << 11,
  HC_IBV_QP_RQ_PSN = 1 << 12,
  HC_IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
  HC_IBV_QP_MIN_RNR_TIMER = 1 << 15,
  HC_IBV_QP_SQ_PSN = 1 << 16,
  HC_IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
  HC_IBV_QP_DEST_QPN = 1 << 20
};

struct ibv_qp_attr {
  int qp_state, cur_qp_state, path_mtu, path_mig_state;
  uint32_t qkey, rq_psn, sq_psn, dest_qp_num;
  unsigned int qp_access_flags;
  struct ibv_qp_cap cap;
  struct ibv_ah_attr ah_attr, alt_ah_attr;
  uint16_t pkey_index, alt_pkey_index;
  uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout,
      retry_cnt, rnr_retry, alt_port_num, alt_timeout;
  uint32_t rate_limit;
};

struct ibv_sge {
  uint64_t addr;
  uint32_t length, lkey;
};

/* enum ibv_wr_opcode, enum ibv_send_flags */
enum { HC_IBV_WR_RDMA_WRITE = 0, HC_IBV_WR_RDMA_WRITE_WITH_IMM = 1, HC_IBV_WR_RDMA_READ = 4 };
enum { HC_IBV_SEND_SIGNALED = 1 << 1, HC_IBV_SEND_INLINE = 1 << 3 };

struct ibv_send_wr {
  uint64_t wr_id;
  struct ibv_send_wr *next;
  struct ibv_sge *sg_list;
  int num_sge;
  int opcode;
  unsigned int send_flags;
  uint32_t imm_data; /* big endian */
  union {
    struct {
      uint64_t remote_addr;
      uint32_t rkey;
    } rdma;
    uint8_t largest[32]; /* the atomic and UD variants */
  } wr;
  uint32_t qp_type_xrc;
  /* bind_mw / tso: 48 bytes on LP64, unused */
  uint8_t tail[48] __attribute__((aligned(8)));
};

struct ibv_recv_wr {
  uint64_t wr_id;
  struct ibv_recv_wr *next;
  struct ibv_sge *sg_list;
  int num_sge;
};

/* enum ibv_wc_status (SUCCESS, and the flush every pending WR gets once a QP
 * has failed), enum ibv_wc_opcode, enum ibv_wc_flags */
enum { HC_IBV_WC_SUCCESS = 0, HC_IBV_WC_WR_FLUSH_ERR = 5 };
enum { HC_IBV_WC_RDMA_WRITE = 1, HC_IBV_WC_RDMA_READ = 2, HC_IBV_WC_RECV_RDMA_WITH_IMM = 129 };
enum { HC_IBV_WC_WITH_IMM = 1 << 1 };

struct ibv_wc {
  uint64_t wr_id;
  int status, opcode;
  uint32_t vendor_err, byte_len;
  uint32_t imm_data; /* big endian */
  uint32_t qp_num, src_qp;
  unsigned int wc_flags;
  uint16_t pkey_index, slid;
  uint8_t sl, dlid_path_bits;
};

/* The exported functions this transport calls, resolved in one loop. */
#define HC_IB_SYMBOLS(X)                                                                                          \
  X(ibv_get_device_list, struct ibv_device **, (int *num_devices))                                                \
  X(ibv_free_device_list, void, (struct ibv_device * *list))                                                      \
  X(ibv_get_device_name, const char *, (struct ibv_device * device))                                              \
  X(ibv_open_device, struct ibv_context *, (struct ibv_device * device))                                          \
  X(ibv_close_device, int, (struct ibv_context * context))                                                        \
  X(ibv_query_port, int, (struct ibv_context * context, uint8_t port_num, struct ibv_port_attr * attr))           \
  X(ibv_query_gid, int, (struct ibv_context * context, uint8_t port_num, int index, union ibv_gid *gid))          \
  X(ibv_alloc_pd, struct ibv_pd *, (struct ibv_context * context))                                                \
  X(ibv_dealloc_pd, int, (struct ibv_pd * pd))                                                                    \
  X(ibv_reg_mr, struct ibv_mr *, (struct ibv_pd * pd, void *addr, size_t length, int access))                     \
  X(ibv_dereg_mr, int, (struct ibv_mr * mr))                                                                      \
  X(ibv_create_cq, struct ibv_cq *,                                                                               \
    (struct ibv_context * context, int cqe, void *cq_context, struct ibv_comp_channel *channel, int comp_vector)) \
  X(ibv_destroy_cq, int, (struct ibv_cq * cq))                                                                    \
  X(ibv_create_qp, struct ibv_qp *, (struct ibv_pd * pd, struct ibv_qp_init_attr * attr))                         \
  X(ibv_modify_qp, int, (struct ibv_qp * qp, struct ibv_qp_attr * attr, int attr_mask))                           \
  X(ibv_destroy_qp, int, (struct ibv_qp * qp))                                                                    \
  X(ibv_wc_status_str, const char *, (int status))                                                                \
  X(ibv_create_comp_channel, struct ibv_comp_channel *, (struct ibv_context * context))                           \
  X(ibv_destroy_comp_channel, int, (struct ibv_comp_channel * channel))                                           \
  X(ibv_get_cq_event, int, (struct ibv_comp_channel * channel, struct ibv_cq * *cq, void **cq_context))           \
  X(ibv_ack_cq_events, void, (struct ibv_cq * cq, unsigned int nevents))

/* Optional: rdma-core 34 and later (IBVERBS_1.12); NULL before. */
typedef struct ibv_mr *(*hc_ibv_reg_dmabuf_mr_fn)(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
                                                  int fd, int access);

struct hc_ib_verbs {
#define HC_IB_FIELD(name, ret, args) ret(*name) args;
  HC_IB_SYMBOLS(HC_IB_FIELD)
#undef HC_IB_FIELD
  hc_ibv_reg_dmabuf_mr_fn ibv_reg_dmabuf_mr;
};

static inline int hc_ib_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
static inline int hc_ib_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  return qp->context->ops.post_recv(qp, wr, bad);
}
static inline int hc_ib_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
  return cq->context->ops.req_notify_cq(cq, solicited_only);
}
static inline int hc_ib_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  return cq->context->ops.poll_cq(cq, n, wc);
}

#endif
