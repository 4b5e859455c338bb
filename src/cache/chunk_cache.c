/*
 * chunk_cache.c — the built-in prefix cache that reuses nothing (SGLang ChunkCache): a
 * finished request's committed KV is freed, an unfinished one continues from its own
 * row. A flow created without a cache uses it.
 */
#include "../flow/flow.h"

#include <string.h>

static int chunk_is_chunk(void *self) {
  (void)self;
  return 1;
}

kvc_status kvc__chunk_cache_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  (void)self;
  (void)is_insert;
  /* SGLang ChunkCache: the committed KV is simply freed. */
  int64_t committed = req->kv_committed_len;
  if (committed <= 0) return KVC_OK;
  KVC_FORWARD(kvc_flow_row_slots(flow, req->req_row, 0, committed, flow->row_slots));
  return kvc_flow_free_slots(flow, flow->row_slots, (size_t)committed);
}

kvc_status kvc__chunk_cache_unfinished(void *self, kvc_flow *flow, kvc_req_state *req) {
  (void)self;
  (void)flow;
  /* The next chunk's prefix is the row itself. */
  req->prefix_slots = NULL;
  req->prefix_len = req->kv_committed_len;
  return KVC_OK;
}

kvc_prefix_cache kvc_chunk_cache(void) {
  kvc_prefix_cache c;
  memset(&c, 0, sizeof c);
  c.is_chunk_cache = chunk_is_chunk;
  c.cache_finished_req = kvc__chunk_cache_finished;
  c.cache_unfinished_req = kvc__chunk_cache_unfinished;
  return c;
}
