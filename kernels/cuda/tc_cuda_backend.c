/* The table libspotlab-train-cuda.so exports for spotlab-train
 * (tc_cuda_api.h): this module's CUDA and NCCL functions. */
#include "config.h"
#include "sl_log.h"
#include "tc_cuda.h"
#include "tc_cuda_api.h"
#include "tc_nccl.h"

_Static_assert(TC_RDV_ID_BYTES == TC_NCCL_ID_BYTES, "the rendezvous carries NCCL ids");

__attribute__((visibility("default"))) extern const struct tc_cuda_api tc_cuda_api_v1;
const struct tc_cuda_api tc_cuda_api_v1 = {
    .version = TC_CUDA_API_VERSION,
    .build = SPOTLAB_VERSION,
    .sizes = TC_CUDA_API_SIZES,
    .log_init = sl_log_init,
    .device_count = tc_cuda_device_count,
    .device_name = tc_cuda_device_name,
    .model_new = tc_cuda_model_new,
    .model_free = tc_cuda_model_free,
    .model_mem_bytes = tc_cuda_model_mem_bytes,
    .model_n_params = tc_cuda_model_n_params,
    .model_ctx = tc_cuda_model_ctx,
    .ctx_stream = tc_cuda_ctx_stream,
    .model_params = tc_cuda_model_params,
    .model_grads = tc_cuda_model_grads,
    .model_m = tc_cuda_model_m,
    .model_v = tc_cuda_model_v,
    .model_put = tc_cuda_model_put,
    .model_params_written = tc_cuda_model_params_written,
    .model_get = tc_cuda_model_get,
    .model_adam_t = tc_cuda_model_adam_t,
    .model_set_adam_t = tc_cuda_model_set_adam_t,
    .forward = tc_cuda_forward,
    .backward = tc_cuda_backward,
    .clip_grads = tc_cuda_clip_grads,
    .adamw = tc_cuda_adamw,
    .logits = tc_cuda_logits,
    .nccl_unique_id = tc_nccl_unique_id,
    .nccl_new = tc_nccl_new,
    .nccl_free = tc_nccl_free,
    .nccl_allreduce_f32 = tc_nccl_allreduce_f32,
    .nccl_allreduce_host_f64 = tc_nccl_allreduce_host_f64,
    .nccl_broadcast = tc_nccl_broadcast,
    .nccl_broadcast_host = tc_nccl_broadcast_host,
};
