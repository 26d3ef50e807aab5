/*
 * net/ib declares the verbs structs it uses by value (src/net/ib_verbs.h) so
 * that hetccl builds without rdma-core. Where rdma-core's own header is
 * installed, this checks every offset and size the transport relies on
 * against it; elsewhere it skips (77), saying so.
 */
#include <stdio.h>

#if __has_include(<infiniband/verbs.h>)
/* Both headers define the same struct names: the real one goes into a
 * namespace of its own through a macro prefix. */
#define HC_HAVE_VERBS_H 1
#include "net/ib_verbs.h"
#define ibv_gid real_ibv_gid
#define ibv_context_ops real_ibv_context_ops
#define ibv_context real_ibv_context
#define ibv_port_attr real_ibv_port_attr
#define ibv_mr real_ibv_mr
#define ibv_cq real_ibv_cq
#define ibv_qp real_ibv_qp
#define ibv_qp_cap real_ibv_qp_cap
#define ibv_qp_init_attr real_ibv_qp_init_attr
#define ibv_global_route real_ibv_global_route
#define ibv_ah_attr real_ibv_ah_attr
#define ibv_qp_attr real_ibv_qp_attr
#define ibv_sge real_ibv_sge
#define ibv_send_wr real_ibv_send_wr
#define ibv_recv_wr real_ibv_recv_wr
#define ibv_wc real_ibv_wc
#define ibv_device real_ibv_device
#define ibv_pd real_ibv_pd
#define ibv_srq real_ibv_srq
#define ibv_comp_channel real_ibv_comp_channel
#include <infiniband/verbs.h>
#undef ibv_gid
#undef ibv_context_ops
#undef ibv_context
#undef ibv_port_attr
#undef ibv_mr
#undef ibv_cq
#undef ibv_qp
#undef ibv_qp_cap
#undef ibv_qp_init_attr
#undef ibv_global_route
#undef ibv_ah_attr
#undef ibv_qp_attr
#undef ibv_sge
#undef ibv_send_wr
#undef ibv_recv_wr
#undef ibv_wc
#undef ibv_comp_channel

#define SAME_SIZE(t) _Static_assert(sizeof(struct t) == sizeof(struct real_##t), #t " size")
#define SAME_OFF(t, f)                                                                        \
  _Static_assert(offsetof(struct t, f) == offsetof(struct real_##t, f), #t "." #f " offset"); \
  _Static_assert(sizeof(((struct t *)0)->f) == sizeof(((struct real_##t *)0)->f), #t "." #f " size")

_Static_assert(sizeof(union ibv_gid) == sizeof(union real_ibv_gid), "gid");
SAME_SIZE(ibv_context_ops);
_Static_assert(offsetof(struct ibv_context_ops, poll_cq) == offsetof(struct real_ibv_context_ops, poll_cq), "poll_cq");
_Static_assert(offsetof(struct ibv_context_ops, req_notify_cq) == offsetof(struct real_ibv_context_ops, req_notify_cq),
               "notify");
_Static_assert(offsetof(struct ibv_context_ops, post_send) == offsetof(struct real_ibv_context_ops, post_send),
               "post_send");
_Static_assert(offsetof(struct ibv_context_ops, post_recv) == offsetof(struct real_ibv_context_ops, post_recv),
               "post_recv");
SAME_OFF(ibv_context, device);
SAME_OFF(ibv_context, ops);
SAME_OFF(ibv_context, num_comp_vectors);
/* The exported ibv_query_port fills rdma-core's _compat_ibv_port_attr,
 * which ends at `flags`; verbs.h's struct has grown past that
 * (port_cap_flags2, then active_speed_ex in newer rdma-core), so the
 * fields up to `flags` must match and ours must hold them. */
_Static_assert(sizeof(struct ibv_port_attr) >= offsetof(struct real_ibv_port_attr, flags) + 1, "ibv_port_attr size");
SAME_OFF(ibv_port_attr, flags);
SAME_OFF(ibv_port_attr, state);
SAME_OFF(ibv_port_attr, active_mtu);
SAME_OFF(ibv_port_attr, gid_tbl_len);
SAME_OFF(ibv_port_attr, lid);
SAME_OFF(ibv_port_attr, link_layer);
SAME_SIZE(ibv_mr);
SAME_OFF(ibv_mr, lkey);
SAME_OFF(ibv_mr, rkey);
SAME_OFF(ibv_cq, context);
SAME_OFF(ibv_cq, channel);
SAME_OFF(ibv_comp_channel, fd);
SAME_OFF(ibv_qp, context);
SAME_OFF(ibv_qp, qp_num);
SAME_OFF(ibv_qp, state);
SAME_SIZE(ibv_qp_cap);
SAME_SIZE(ibv_qp_init_attr);
SAME_OFF(ibv_qp_init_attr, cap);
SAME_OFF(ibv_qp_init_attr, qp_type);
SAME_OFF(ibv_qp_init_attr, sq_sig_all);
SAME_SIZE(ibv_global_route);
SAME_SIZE(ibv_ah_attr);
SAME_OFF(ibv_ah_attr, grh);
SAME_OFF(ibv_ah_attr, dlid);
SAME_OFF(ibv_ah_attr, is_global);
SAME_OFF(ibv_ah_attr, port_num);
SAME_SIZE(ibv_qp_attr);
SAME_OFF(ibv_qp_attr, qp_state);
SAME_OFF(ibv_qp_attr, path_mtu);
SAME_OFF(ibv_qp_attr, rq_psn);
SAME_OFF(ibv_qp_attr, sq_psn);
SAME_OFF(ibv_qp_attr, dest_qp_num);
SAME_OFF(ibv_qp_attr, qp_access_flags);
SAME_OFF(ibv_qp_attr, ah_attr);
SAME_OFF(ibv_qp_attr, pkey_index);
SAME_OFF(ibv_qp_attr, max_rd_atomic);
SAME_OFF(ibv_qp_attr, max_dest_rd_atomic);
SAME_OFF(ibv_qp_attr, min_rnr_timer);
SAME_OFF(ibv_qp_attr, port_num);
SAME_OFF(ibv_qp_attr, timeout);
SAME_OFF(ibv_qp_attr, retry_cnt);
SAME_OFF(ibv_qp_attr, rnr_retry);
SAME_SIZE(ibv_sge);
SAME_SIZE(ibv_send_wr);
SAME_OFF(ibv_send_wr, sg_list);
SAME_OFF(ibv_send_wr, num_sge);
SAME_OFF(ibv_send_wr, opcode);
SAME_OFF(ibv_send_wr, send_flags);
SAME_OFF(ibv_send_wr, imm_data);
_Static_assert(offsetof(struct ibv_send_wr, wr.rdma.remote_addr) ==
                   offsetof(struct real_ibv_send_wr, wr.rdma.remote_addr),
               "remote_addr");
_Static_assert(offsetof(struct ibv_send_wr, wr.rdma.rkey) == offsetof(struct real_ibv_send_wr, wr.rdma.rkey), "rkey");
SAME_SIZE(ibv_recv_wr);
SAME_SIZE(ibv_wc);
SAME_OFF(ibv_wc, status);
SAME_OFF(ibv_wc, opcode);
SAME_OFF(ibv_wc, imm_data);
SAME_OFF(ibv_wc, qp_num);
SAME_OFF(ibv_wc, wc_flags);
_Static_assert((int)HC_IBV_WC_RECV_RDMA_WITH_IMM == (int)IBV_WC_RECV_RDMA_WITH_IMM, "wc opcode");
_Static_assert((int)HC_IBV_WC_RDMA_WRITE == (int)IBV_WC_RDMA_WRITE, "wc opcode");
_Static_assert((int)HC_IBV_WC_RDMA_READ == (int)IBV_WC_RDMA_READ, "wc opcode");
_Static_assert((int)HC_IBV_WC_WR_FLUSH_ERR == (int)IBV_WC_WR_FLUSH_ERR, "flush");
_Static_assert((int)HC_IBV_WC_WITH_IMM == (int)IBV_WC_WITH_IMM, "with imm");
_Static_assert((int)HC_IBV_WR_RDMA_WRITE_WITH_IMM == (int)IBV_WR_RDMA_WRITE_WITH_IMM, "wr opcode");
_Static_assert((int)HC_IBV_WR_RDMA_READ == (int)IBV_WR_RDMA_READ, "wr opcode");
_Static_assert((int)HC_IBV_SEND_SIGNALED == (int)IBV_SEND_SIGNALED && (int)HC_IBV_SEND_INLINE == (int)IBV_SEND_INLINE,
               "send flags");
_Static_assert((int)HC_IBV_QPS_ERR == (int)IBV_QPS_ERR && (int)HC_IBV_QPS_RTS == (int)IBV_QPS_RTS, "qp states");
_Static_assert((int)HC_IBV_QP_DEST_QPN == (int)IBV_QP_DEST_QPN &&
                   (int)HC_IBV_QP_MAX_DEST_RD_ATOMIC == (int)IBV_QP_MAX_DEST_RD_ATOMIC,
               "qp attr mask");
_Static_assert((int)HC_IBV_QPT_RC == (int)IBV_QPT_RC, "rc");
_Static_assert((int)HC_IBV_PORT_ACTIVE == (int)IBV_PORT_ACTIVE, "port active");
_Static_assert((int)HC_IBV_LINK_LAYER_ETHERNET == (int)IBV_LINK_LAYER_ETHERNET, "link layer");
_Static_assert((int)HC_IBV_MTU_4096 == (int)IBV_MTU_4096, "mtu");
_Static_assert((int)HC_IBV_ACCESS_REMOTE_WRITE == (int)IBV_ACCESS_REMOTE_WRITE, "access");
_Static_assert((int)HC_IBV_ACCESS_REMOTE_READ == (int)IBV_ACCESS_REMOTE_READ, "access");
#endif

int main(void) {
#ifdef HC_HAVE_VERBS_H
  printf("net/ib verbs layouts match rdma-core's infiniband/verbs.h\n");
  return 0;
#else
  printf("skip: infiniband/verbs.h is not installed (libibverbs-dev); layouts not checked\n");
  return 77;
#endif
}
