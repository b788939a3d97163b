"""Tests of reports.categories: the kernel-name -> category rule table."""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path

import pytest

from nsys_parsers.errors import BadOption
from reports.categories import (
    CATEGORIES,
    CategoryRule,
    builtin_rules,
    categorize,
    categorize_many,
    load_rules,
    rules_table,
)

FIXTURES = Path(__file__).resolve().parents[1] / "shared" / "fixtures" / "nsys"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/nsys")

AN = "(anonymous namespace)"

# (kernel name, expected category). Names are real (shortened template arguments where
# they do not matter) from PyTorch eager, TorchInductor, cuBLAS(Lt), cuDNN, CUTLASS,
# flash-attn, xFormers, NCCL, CUB/Thrust, CuPy, nvFuser and user code.
CASES = [
    # ---- gemm ----
    ("ampere_sgemm_128x64_tn", "gemm"),
    ("volta_sgemm_64x64_nn", "gemm"),
    ("maxwell_sgemm_128x128_raggedMn_nn", "gemm"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "gemm"),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", "gemm"),
    ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNN", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(T1::Params)", "gemm"),
    ("cutlass_80_wmma_tensorop_h161616gemm_32x32_128x1_tn_align8", "gemm"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cute::SM90_TMA_LOAD, cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, half_t>>>>(T1::Params)", "gemm"),
    ("void gemmSN_TN_kernel<float, (int)128, (int)16, (int)2, (int)4, (int)4, (int)4, (bool)1, "
     "cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<float>>(cublasGemmSmallNParams<T9, T10, T1>)", "gemm"),
    ("void gemv2T_kernel_val<int, int, float2, float2, float2, (int)128, (int)16, (int)2, (int)2, (bool)0, "
     "cublasGemvParams<cublasGemvTensorBatched<const float2>, cublasGemvTensorBatched<float2>, float2>>(T11, T5, T5)", "gemm"),
    ("void splitKreduce_kernel<(int)32, (int)16, int, float, float, float, float, (bool)1, (bool)0, (bool)0>"
     "(cublasSplitKParams<T6>, const T4 *, const T5 *, T5 *, const T6 *, const T6 *, const T7 *, const T4 *, T7 *, void *, long, T6 *, int *)", "gemm"),
    ("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, __nv_bfloat16, __nv_bfloat16, float>(cublasLt::cublasSplitKParams<T6>)", "gemm"),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, (int)1024, (int)5, (int)5, (int)3, (int)3, (int)3, (int)1, (bool)1, (bool)0, (bool)1>"
     "(int, int, int, const T1 *, int, T2 *, T1 *, kernel_conv_params, int, float, float, int, T2 *, T2 *, int, int)", "gemm"),
    ("volta_scudnn_128x32_relu_interior_nn_v1", "gemm"),
    ("turing_fp16_s1688cudnn_fp16_256x64_sliced1x2_ldg8_relu_exp_small_nhwc_tn_v1", "gemm"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn", "gemm"),
    ("sm86_xmma_dgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x16", "gemm"),
    ("void cudnn::detail::wgrad_alg0_engine<float, (int)128, (int)5, (int)5, (int)3, (int)3, (int)3, (bool)0, (int)512>(int, int, int, const T1 *, int, T1 *, const T1 *, kernel_grad_params, unsigned long long, int, float, int, int, int, int)", "gemm"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<T1, T2>)", "gemm"),
    ("void fft2d_r2c_32x32<float, (bool)0, (unsigned int)1, (bool)0>(float2 *, const T1 *, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)", "gemm"),
    ("void im2col4d_kernel<float, int>(im2col4d_params, cudnnConvolutionStruct, cudnnTensor4dStruct, const T1 *, T1 *, int)", "gemm"),
    ("void at::native::im2col_kernel<float>(long, const T1 *, long, long, long, long, long, long, long, long, long, long, long, long, T1 *)", "gemm"),
    ("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<(int)3, float, int>(at::GenericPackedTensorAccessor<const T2, (unsigned long)4, at::DefaultPtrTraits, T3>)", "gemm"),
    ("cudnn::gemm::computeOffsetsKernel(cudnn::gemm::ComputeOffsetsParams)", "gemm"),
    ("compute_gemm_pointers(float2 **, const float2 *, int, const float2 *, int, const float2 *, int, int)", "gemm"),
    ("triton_tem_fused_addmm_relu_0", "gemm"),
    ("matmul_kernel", "gemm"),
    ("void trsm_left_kernel<float, (int)256, (int)4, (bool)0, (bool)0, (bool)0, (bool)0, (bool)0>(cublasTrsmParams<float>, float, const float *, int)", "gemm"),
    # ---- attention ----
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t>, (bool)0, (bool)1>(Flash_fwd_params)", "attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<(int)64, (int)128, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::half_t>, (bool)1>(pytorch_flash::Flash_bwd_params)", "attention"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, (bool)0, cutlass::half_t>, (bool)0, (bool)1>(Flash_fwd_params)", "attention"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, (bool)0, cutlass::half_t>, (int)4, (int)1, (bool)1>(Flash_fwd_params)", "attention"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<(int)2, cute::tuple<cute::C<(int)1>>>>>>(T1::Params)", "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, (bool)1, (int)64, (int)64, (int)64, (bool)1, (bool)1>::Params)", "attention"),
    ("fmha_cutlassB_f16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::half_t, (bool)1, (bool)0, (bool)1, (int)64, (int)64, (int)64, (bool)0>::Params)", "attention"),
    ("void attention_kernel_batched_impl<AttentionKernel<float, cutlass::arch::Sm80, (bool)1, (int)64, (int)64, (bool)1, (bool)1, (bool)1>>(T1::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    ("triton_per_fused__scaled_dot_product_efficient_attention_0", "attention"),
    ("triton_tem_fused_flex_attention_0", "attention"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<(flashinfer::MaskMode)1, (unsigned int)16>(flashinfer::BatchPrefillPagedParams)", "attention"),
    ("void vllm::paged_attention_v2_kernel<unsigned short, unsigned short, (int)128, (int)16, (int)128>(float *, float *, T1 *, const T1 *, const T2 *, const T2 *, int, float)", "attention"),
    ("_attn_fwd", "attention"),
    # ---- softmax ----
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<(int)4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<(int)4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, int)", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<(int)4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(T2 *, const T4 *, const T4 *, long)", "softmax"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, (int)7, (bool)0, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)", "softmax"),
    ("void <unnamed>::softmax_warp_backward<float, float, float, (int)10, (bool)1, (bool)0>(T2 *, const T1 *, const T1 *, int, int, int, const bool *)", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SpatialSoftMaxForward<float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T3 *, const T1 *, unsigned int, unsigned int, unsigned int)", "softmax"),
    ("triton_red_fused__softmax_0", "softmax"),
    ("triton_per_fused__log_softmax_nll_loss_forward_1", "softmax"),
    ("void scaled_masked_softmax_warp_forward<__half, __half, float, (int)11>(T2 *, const T1 *, const unsigned char *, T3, int, int, int, int)", "softmax"),
    # ---- reduction ----
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, (int)4, (int)4>>(T3)", "reduction"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, at::native::and_kernel_cuda(at::TensorIterator &)::[lambda() (instance 1)]::operator ()() const::[lambda(bool, bool) (instance 1)]>, unsigned int, bool, (int)4, (int)4>>(T3)", "reduction"),
    ("void cub::DeviceReduceKernel<cub::DeviceReducePolicy<float, int, cub::Sum>::Policy600, float *, int, cub::Sum, float>(T2, T5 *, T3, cub::GridEvenShare<T3>, T4)", "reduction"),
    ("void cub::DeviceReduceSingleTileKernel<cub::DeviceReducePolicy<float, int, cub::Min>::Policy600, float *, float *, int, cub::Min, float, float>(T2, T3, T4, T5, T6)", "reduction"),
    ("void cub::CUB_200200_800_NS::DeviceReduceKernel<cub::CUB_200200_800_NS::DeviceReducePolicy<float, float, int, cub::CUB_200200_800_NS::Sum>::Policy600>(T2, T5 *, T3)", "reduction"),
    ("void cub::DeviceScanKernel<cub::DeviceScanPolicy<float>::Policy600, float *, float *, cub::ScanTileState<float, (bool)1>, cub::Sum, cub::NullType, int, float>(T2, T3, T4, int, T5, T6, T7)", "reduction"),
    ("void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float>>(T1 *, const T1 *, unsigned int, unsigned int, T1, T2)", "reduction"),
    ("triton_red_fused_sum_0", "reduction"),
    ("triton_per_fused_mean_1", "reduction"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(T1 *, T1 *, T1 *, const long *, const T1 *, bool, long, long, long, long)", "reduction"),
    ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(T1 *, const T1 *, const long *, const T1 *, const T1 *, bool, int, int, long, long)", "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, const T1 *, long, long, long, int, int, int, int, int, int, int, int, int, int, T1 *, long *)", "reduction"),
    ("void cudnn::ops::pooling_fw_4d_kernel<float, float, cudnn::maxpooling_func<float, (cudnnNanPropagation_t)0>, (int)0, (bool)0>(cudnnTensorStruct, const T1 *, cudnnTensorStruct, T1 *, cudnnPoolingStruct, T2, T2, int, cudnn::reduced_divisor, cudnn::reduced_divisor)", "reduction"),
    ("void clover::par_reduce_kernel<field_summary(global_variables &, parallel_ &)::[lambda(int) (instance 1)]>(T1)", "reduction"),
    ("cupy_var_core_float32", "reduction"),
    ("void dot_kernel<float, (int)128, (int)0, cublasDotParams<cublasGemvTensor<const float>, cublasGemvTensorStridedBatched<float>>>(T4)", "reduction"),
    ("void reduce_1Block_kernel<float, (int)128, (int)7, cublasGemvTensorStridedBatched<float>, cublasGemvTensorStridedBatched<float>, cublasGemvTensorStridedBatched<float>>(const T1 *, T1, T4, int, const T1 *, T1, T5, T6, cublasPointerMode_t, const cublasLtEpilogue_t *)", "reduction"),
    # ---- normalization ----
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)", "normalization"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)", "normalization"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)", "normalization"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, T2, const T1 *, T2 *, T2 *)", "normalization"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>(long, long, const T1 *, const T1 *, const T2 *, const T2 *, T1 *, T1 *)", "normalization"),
    ("void at::native::(anonymous namespace)::ComputeInternalGradientsCUDAKernel<float>(long, long, const T1 *, const T1 *, const T1 *, T2 *, T2 *)", "normalization"),
    ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(at::GenericPackedTensorAccessor<const T2, (unsigned long)3, at::RestrictPtrTraits, T5>, T4, T4, at::GenericPackedTensorAccessor<T4, (unsigned long)1, at::RestrictPtrTraits, T5>)", "normalization"),
    ("void at::native::batch_norm_backward_reduce_kernel<float, float, float, int>(at::GenericPackedTensorAccessor<const T1, (unsigned long)3, at::DefaultPtrTraits, T4>)", "normalization"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, (int)512, (bool)1, (int)1>(cudnnTensorStruct, const T1 *, cudnnTensorStruct, T1 *, const T2 *, const T2 *, T2, T2, T2 *, T2 *, T2 *, T2 *, T2, T2)", "normalization"),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, (int)512, (bool)1, (int)1>(T1, T1, T1, T1, cudnnTensorStruct, const T1 *, cudnnTensorStruct, const T1 *, cudnnTensorStruct, T1 *, const T2 *, T2 *, T2 *, const T2 *, const T2 *, T2)", "normalization"),
    ("void cuApplyLayerNorm<c10::Half, float, c10::Half>(T3 *, T2 *, T2 *, const T1 *, int, int, T2, const T3 *, const T3 *)", "normalization"),
    ("void cuComputePartGradGammaBeta<c10::Half, float, c10::Half>(const T3 *, const T1 *, int, int, const T2 *, const T2 *, T2, T2 *, T2 *)", "normalization"),
    ("void vllm::rms_norm_kernel<c10::BFloat16>(T1 *, const T1 *, const T1 *, float, int, int)", "normalization"),
    ("rmsnorm_fwd_tuned_kernel", "normalization"),
    ("triton_per_fused_add_mean_mul_pow_rsqrt_0", "normalization"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", "normalization"),
    ("triton_per_fused_native_layer_norm_0", "normalization"),
    ("triton_red_fused_native_layer_norm_native_layer_norm_backward_3", "normalization"),
    # ---- elementwise ----
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AbsFunctor<c10::Half>, std::array<char *, (unsigned long)2>>(int, T2, T3)", "elementwise"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<at::native::BinaryFunctor<float, float, float, at::native::AddFunctor<float>>, at::detail::Array<char *, (int)3>, OffsetCalculator<(int)2, unsigned int, (bool)0>, OffsetCalculator<(int)1, unsigned int, (bool)0>, at::native::memory::LoadWithoutCast, at::native::memory::StoreWithoutCast>(int, T1, T2, T3, T4, T5, T6)", "elementwise"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    ("triton_poi_fused_addmm_gelu_1", "elementwise"),
    ("triton_poi_fused_convolution_relu_2", "elementwise"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::templates::cuda::normal_and_transform<c10::Half, float, at::CUDAGeneratorImpl *, void at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl *>(const at::TensorBase &, double, double, T1)::[lambda() (instance 1)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, T3, T4)::[lambda(curandStatePhilox4_32_10 *) (instance 2)], void at::native::<unnamed>::distribution_nullary_kernel>(long, at::PhiloxCudaState, T3, T4)", "elementwise"),
    ("void at::native::index_elementwise_kernel<(int)128, (int)4, void at::native::gpu_index_kernel<void at::native::index_kernel_impl<at::native::OpaqueType<(int)4>>(at::TensorIteratorBase &, c10::ArrayRef<long>, c10::ArrayRef<long>)::[lambda(char *, const char *, long) (instance 1)]>(at::TensorIteratorBase &, c10::ArrayRef<long>, c10::ArrayRef<long>, const T1 &, bool)::[lambda(int) (instance 1)]>(long, T3)", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::BUnaryFunctor<float, float, float, at::native::CUDAFunctorOnSelf_add<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)", "elementwise"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::<unnamed>::masked_fill_kernel(at::TensorIterator &, const c10::Scalar &)::[lambda() (instance 1)]::operator ()() const::[lambda(float, bool) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", "elementwise"),
    ("void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)", "elementwise"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, (int)2, (int)2, (int)-2, (bool)1>(at::cuda::detail::TensorInfo<T1, T3>)", "elementwise"),
    ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, (int)1, (int)4, bool>(at::cuda::detail::TensorInfo<const T1, T3>, at::PhiloxCudaState)", "elementwise"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, (bool)1>(T1 *, const T1 *, int)", "elementwise"),
    ("silu_kernel", "elementwise"),
    ("gelu_kernel", "elementwise"),
    ("void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__parallel_for::ParallelForAgent<thrust::cuda_cub::__fill::functor<thrust::device_ptr<float>, float>, unsigned long>, thrust::cuda_cub::__fill::functor<thrust::device_ptr<float>, float>, unsigned long>(T2, T3)", "elementwise"),
    ("cupy_multiply__float_float32_float32", "elementwise"),
    ("void axpy_kernel_val<float, float>(cublasAxpyParamsVal<float, float, float>)", "elementwise"),
    ("void kernelPointwiseApply2<TensorAddOp<float>, float, float, unsigned int, (int)-2, (int)-2>(OffsetInfo<T2, T4, T5>, OffsetInfo<T3, T4, T6>, T4, T1)", "elementwise"),
    # ---- optimizer ----
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<(int)4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, (int)4, (at::native::ADAM_MODE)1, (bool)0>, float *, double, double, double, double, double, bool, const float *, const float *>(T1, T2, T3...)", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<(int)4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, (int)4, (at::native::ADAM_MODE)1, (bool)1>>(T1, T2, T3...)", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<(int)2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, (int)2, (int)2, (int)0>, std::plus<float>, float>(T1, T2, T3...)", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<(int)1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, float *, int>(T1, T2, T3...)", "optimizer"),
    ("void at::native::lpnorm_cleanup<float, (at::native::(anonymous namespace)::NormType)1, float, float>(const T4 *, at::native::(anonymous namespace)::TensorListAddresses, int)", "optimizer"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<(int)4>, AdamFunctor<float, float, float>, float, float, float, float, float, float, adamMode_t, float>(long, int *, T1, T2, T3...)", "optimizer"),
    ("adam_kernel", "optimizer"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<(int)2>, LAMBStage1Functor<float, float>, float, float>(long, int *, T1, T2, T3...)", "optimizer"),
    ("void at::native::amp_update_scale_cuda_kernel(float *, int *, const float *, double, double, int)", "optimizer"),
    ("triton_for_fused_0", "optimizer"),
    # ---- copy ----
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, (int)4, (int)64, (int)64>(T1 *, at::native::(anonymous namespace)::CatArrInputTensorMetadata<T1, T2, T4, T5>, at::native::(anonymous namespace)::TensorSizeStride<T2, (unsigned int)4>, int, T2)", "copy"),
    ("void at::native::<unnamed>::CatArrayBatchedCopy_vectorized<at::native::<unnamed>::OpaqueType<(unsigned int)4>, unsigned int, (int)1, (int)128, (int)1, (int)16, (int)4>(char *, at::native::<unnamed>::CatArrInputTensorMetadata<T1, T2, T4, T5>)", "copy"),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", "copy"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", "copy"),
    ("copy_kernel", "copy"),
    ("memcpy32_post", "copy"),
    ("[CUDA memcpy Device-to-Device]", "copy"),
    ("[CUDA memcpy HtoD]", "copy"),
    ("[CUDA memset]", "copy"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, (bool)0, (bool)1, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<T3>, const T1 *, T2 *)", "copy"),
    ("transposeCoalesced", "copy"),
    ("triton_poi_fused__to_copy_0", "copy"),
    ("triton_poi_fused_clone_1", "copy"),
    ("triton_poi_fused__to_copy_clone_transpose_2", "copy"),
    ("cupy_copy__float32_float32", "copy"),
    # ---- communication ----
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "communication"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm *, unsigned long, ncclWork *)", "communication"),
    ("ncclDevKernel_SendRecv(ncclDevComm *, unsigned long, ncclWork *)", "communication"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)", "communication"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, (int)8>(T1 **, unsigned long, unsigned long, T1 *, unsigned long, unsigned int **, unsigned long, unsigned long)", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, (int)8>(vllm::RankData *, vllm::RankSignals, vllm::Signal *, T1 *, int, int)", "communication"),
    # ---- other ----
    ("kmeans_235_gpu", "other"),
    ("__omp_offloading_31_18a80bc__Z_1...", "other"),
    ("__omp_offloading_fd02_2a7c1b8_main_l42", "other"),
    ("saxpy(double *, double *, double *, double, int)", "other"),
    ("vecAdd(double *, double *, double *, int)", "other"),
    ("kernVectorAdd(const float *, const float *, float *, int)", "other"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, cub::NullType, unsigned int>::Policy800, (bool)0, long, cub::NullType, unsigned int, int, int>(int *, int *, T3 *, T3 *, T4 *, T4 *, T6, int, int)", "other"),
    ("void cub::DeviceMergeSortBlockSortKernel<(bool)0, cub::DeviceMergeSortPolicy<thrust::zip_iterator<thrust::tuple<thrust::device_ptr<unsigned long>, thrust::device_ptr<double>>>>::Policy600>(T2, T3)", "other"),
    ("<unnamed>::nvfuser_none_f0_c0_r0_g0(<unnamed>::Tensor<<unnamed>::__half, (int)3, (int)3>, <unnamed>::TensorMap, <unnamed>::TensorMap)", "other"),
    ("void clover::par_ranged2d_kernel<reset_field_kernel(int, int, int, int, clover::Buffer2D<double> &)::[lambda(int, int) (instance 1)]>(clover::Range2d, T1)", "other"),
    ("void fast_hadamard_transform_kernel<fast_hadamard_transform_kernel_traits<(int)8, (int)12, float>>(HadamardParamsBase)", "other"),
    ("calcAllFullSum", "other"),
    # ---- traps: words inside other words or inside template arguments ----
    ("void my_ns::kernel<my_ns::run()::[lambda(int) (instance 1)]>(int, T1)", "other"),  # lambda is not LAMB
    ("void small_gather_kernel(float *, const int *)", "elementwise"),  # not all_gather
    ("void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, T1 *, T2, cudnn::reduced_divisor)", "other"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::NormOps<float, float, float, float>, unsigned int, float, (int)4, (int)4>>(T3)", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::(anonymous namespace)::normal_kernel_lambda, std::array<char *, (unsigned long)1>>(int, T2, T3)", "elementwise"),
    ("void trt::quantize_kernel<cutlass::half_t, cutlass::float_e4m3_t>(const T1 *, T2 *, int)", "other"),  # cutlass only as a type
    ("", "other"),
    # ---- mangled names (--name mangled) ----
    ("_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIfffEEjfLi4ELi4EEEEEvT1_", "reduction"),
    ("_ZN3cub18DeviceReduceKernelINS_18DeviceReducePolicyIfiNS_3SumEE9Policy600EPfiS2_fEEvT0_PT3_T1_NS_13GridEvenShareIS9_EET2_", "reduction"),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_", "elementwise"),
    ("_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE7_clEvEUlfE_EEvS4_RKT_EUliE_EEviT1_", "copy"),
    ("_ZN7cutlass7Kernel2I34cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align1EEvNT_6ParamsE", "gemm"),
    ("_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_i", "softmax"),
    # ---- short names (--name short): the template arguments are gone ----
    ("reduce_kernel", "reduction"),
    ("vectorized_elementwise_kernel", "elementwise"),
    ("multi_tensor_apply_kernel", "optimizer"),
    ("cunn_SoftMaxForward", "softmax"),
    ("CatArrayBatchedCopy", "copy"),
    # ---- whole CUDA graph launches (nsys_parsers.graphs names them) ----
    ("CUDA graph 4", "cuda graph"),
    ("CUDA graph 1234", "cuda graph"),
    ("void build_cuda_graph_4_kernel(int)", "other"),  # a kernel that only mentions graphs
]


@pytest.mark.parametrize("name, expected", CASES, ids=[f"{i:03d}-{e}" for i, (_, e) in enumerate(CASES)])
def test_builtin_rules(name: str, expected: str) -> None:
    assert expected in CATEGORIES
    assert categorize(name) == expected
    assert categorize(name, load_rules()) == expected


def test_case_count_and_coverage() -> None:
    assert len(CASES) >= 60
    assert {c for _, c in CASES} == set(CATEGORIES)


def test_categories_exact() -> None:
    assert CATEGORIES == (
        "gemm", "attention", "softmax", "reduction", "normalization",
        "elementwise", "optimizer", "copy", "communication", "other", "cuda graph",
    )


def test_builtin_rules_are_valid() -> None:
    rules = builtin_rules()
    assert rules and all(isinstance(r, CategoryRule) for r in rules)
    assert all(r.source == "builtin" for r in rules)
    assert all(r.category in CATEGORIES and r.category != "other" for r in rules)
    assert load_rules() == rules
    assert load_rules(None) == rules


def test_builtin_patterns_are_lower_case() -> None:
    # They are matched against the lower-cased name without re.IGNORECASE (the fast path).
    for rule in builtin_rules():
        assert rule.pattern == rule.pattern.lower(), rule.pattern


def test_case_insensitive() -> None:
    assert categorize("AMPERE_SGEMM_128X64_TN") == "gemm"
    assert categorize("NCCLKERNEL_ALLREDUCE") == "communication"


def test_categorize_many_matches_categorize() -> None:
    names = [n for n, _ in CASES] * 3
    assert categorize_many(names) == [categorize(n) for n in names]
    assert categorize_many(iter(names)) == [e for _, e in CASES] * 3
    assert categorize_many([]) == []


def test_categorize_many_20k_names() -> None:
    # Not timed: only checks that 20k distinct names go through without trouble.
    base = [n for n, _ in CASES]
    names = [f"{base[i % len(base)]}_{i}" if not base[i % len(base)].startswith("triton_") else f"{base[i % len(base)]}"
             for i in range(20_000)]
    out = categorize_many(names)
    assert len(out) == 20_000
    assert set(out) <= set(CATEGORIES)


def test_huge_name() -> None:
    filler = "cutlass::half_t, " * (300 * 1024 // 17)
    name = "void at::native::reduce_kernel<(int)512, " + filler + ">(T3)"
    assert len(name) > 300 * 1024
    assert categorize(name) == "reduction"
    other = "x" * (300 * 1024)
    assert categorize(other) == "other"
    assert categorize("a::" * 100_000) == "other"
    assert categorize(other + " ncclKernel") == "communication"


def test_replacement_character() -> None:
    name = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::Abs\ufffdFunctor<float>>(int, T2, T3)"
    assert categorize(name) == "elementwise"
    assert categorize("\ufffd\ufffd\ufffd") == "other"
    raw = b"ampere_sgemm_\xff\xfe_tn".decode("utf-8", "replace")
    assert categorize(raw) == "gemm"


def test_non_str_inputs() -> None:
    assert categorize(b"ncclKernel_AllReduce\xff") == "communication"  # type: ignore[arg-type]
    assert categorize(None) == "other"  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# User rules (TOML)
# ------------------------------------------------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "rules.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_user_rules_override_builtins(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        # user rules are tried first
        [[rule]]
        category = "attention"
        pattern = "my_custom_attn"

        [[rule]]
        category = "other"
        pattern = 'ampere_sgemm_\\d+x64'

        [[rule]]
        category = "elementwise"
        pattern = "^saxpy\\\\("
        """,
    )
    rules = load_rules(path)
    builtins = builtin_rules()
    assert rules[3:] == builtins
    assert [r.category for r in rules[:3]] == ["attention", "other", "elementwise"]
    assert rules[1].pattern == r"ampere_sgemm_\d+x64"
    assert rules[2].pattern == r"^saxpy\("
    assert all(r.source == str(path) for r in rules[:3])

    assert categorize("void my_custom_attn_kernel<float>(float *)", rules) == "attention"
    assert categorize("MY_CUSTOM_ATTN", rules) == "attention"
    assert categorize("ampere_sgemm_128x64_tn", rules) == "other"  # overridden
    assert categorize("ampere_sgemm_128x128_tn", rules) == "gemm"  # built-in still applies
    assert categorize("saxpy(double *, double *, double *, double, int)", rules) == "elementwise"
    assert categorize("saxpy(double *, double *, double *, double, int)") == "other"
    # A user rule beats a built-in that would match the same name.
    path2 = _write(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = "nccl"\n', "r2.toml")
    assert categorize("ncclKernel_AllReduce_RING_LL_Sum_float", load_rules(str(path2))) == "gemm"
    assert categorize_many(["ncclKernel_x", "vecAdd"], load_rules(path2)) == ["gemm", "other"]


def test_empty_rules_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "# nothing yet\n")
    assert load_rules(path) == builtin_rules()


def test_user_rules_with_groups_and_flags(tmp_path: Path) -> None:
    # Patterns with capture groups / backreferences / inline flags keep their meaning.
    path = _write(
        tmp_path,
        """
        [[rule]]
        category = "copy"
        pattern = '(ab)\\1'
        [[rule]]
        category = "copy"
        pattern = '(?s)zz.yy'
        [[rule]]
        category = "copy"
        pattern = 'plain'
        """,
    )
    rules = load_rules(path)
    assert categorize("xxababxx", rules) == "copy"
    assert categorize("xxabacxx", rules) == "other"
    assert categorize("zz\nyy", rules) == "copy"
    assert categorize("PLAIN", rules) == "copy"


def _bad(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(BadOption) as info:
        load_rules(path)
    message = str(info.value)
    assert str(path) in message
    return message


def test_error_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(BadOption) as info:
        load_rules(path)
    assert str(path) in str(info.value) and "does not exist" in str(info.value)


def test_error_directory(tmp_path: Path) -> None:
    with pytest.raises(BadOption, match="not a regular file"):
        load_rules(tmp_path)


def test_error_invalid_toml(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = "unterminated\n')
    assert "not valid TOML" in message
    assert "[[rule]]" in message  # says what the file should look like


def test_error_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[[rule]]\ncategory = "gemm"\npattern = "caf\xe9"\n')
    with pytest.raises(BadOption) as info:
        load_rules(path)
    assert str(path) in str(info.value)


def test_error_unknown_category(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = "a"\n[[rule]]\ncategory = "atention"\npattern = "my_attn"\n')
    assert "#2" in message and "my_attn" in message
    assert "unknown category 'atention'" in message
    assert 'did you mean "attention"' in message
    assert "gemm, attention, softmax" in message


def test_error_invalid_regex(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = "my_gemm("\n')
    assert "#1" in message and "my_gemm(" in message
    assert "not a valid regular expression" in message and "missing )" in message
    assert "escape" in message


def test_error_empty_pattern(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = ""\n')
    assert "empty" in message


def test_error_missing_key(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rule]]\ncategory = "gemm"\n')
    assert "missing pattern" in message and "#1" in message


def test_error_unknown_key(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = "x"\nregex = "y"\n')
    assert "'regex'" in message


def test_error_wrong_types(tmp_path: Path) -> None:
    assert "must be a string" in _bad(tmp_path, '[[rule]]\ncategory = "gemm"\npattern = 3\n')
    assert "must be a string" in _bad(tmp_path, '[[rule]]\ncategory = ["gemm"]\npattern = "x"\n')


def test_error_bad_top_level(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[[rules]]\ncategory = "gemm"\npattern = "x"\n')
    assert "'rules'" in message and "[[rule]]" in message
    message = _bad(tmp_path, 'rule = "gemm"\n')
    assert "array of tables" in message


def test_hand_built_rules_validated() -> None:
    with pytest.raises(BadOption, match="unknown category"):
        categorize("x", [CategoryRule("matmul", "x", "mine")])
    with pytest.raises(BadOption, match="not a valid regular expression"):
        categorize("x", [CategoryRule("gemm", "(", "mine")])


def test_rules_table(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[rule]]\ncategory = "attention"\npattern = "my_attn"\n')
    rules = load_rules(path)
    table = rules_table(rules)
    assert len(table) == len(rules)
    assert [row["order"] for row in table] == list(range(1, len(rules) + 1))
    assert table[0] == {"order": 1, "category": "attention", "pattern": "my_attn", "source": str(path)}
    assert table[1]["source"] == "builtin"
    assert all(set(row) == {"order", "category", "pattern", "source"} for row in table)
    assert [row["pattern"] for row in table] == [r.pattern for r in rules]
    assert rules_table([]) == []


# ------------------------------------------------------------------------------------------
# Real exports
# ------------------------------------------------------------------------------------------

_MOSTLY_KNOWN = {
    "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite",
    "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite",
}


def _kernel_names(path: Path) -> list[str] | None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables or "StringIds" not in tables:
            return None
        return [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName"
            )
        ]
    finally:
        conn.close()


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared/fixtures/nsys not available")
def test_fixture_kernel_names() -> None:
    files = sorted(FIXTURES.glob("*.sqlite"))
    assert files
    seen = set()
    for path in files:
        names = _kernel_names(path)
        if names is None:
            continue
        seen.add(path.name)
        cats = categorize_many(names)
        assert cats == [categorize(n) for n in names]  # never raises, same answer
        counts = collections.Counter(cats)
        other = sorted(n for n, c in zip(names, cats, strict=True) if c == "other")
        share = len(other) / len(names) if names else 0.0
        print(f"\n{path.name}: {len(names)} distinct kernels, other {share:.0%}, {dict(counts)}")
        for name in other:
            print(f"    other: {name[:160]}")
        if path.name in _MOSTLY_KNOWN:
            assert share < 0.25, f"{path.name}: {share:.0%} of kernel names are 'other': {other}"
    assert _MOSTLY_KNOWN & seen or not (_MOSTLY_KNOWN & {p.name for p in files})


def test_docs_example_loads(tmp_path: Path) -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "CATEGORIES.md"
    if not doc.is_file():
        pytest.skip("docs/CATEGORIES.md not present")
    example = doc.read_text(encoding="utf-8").split("```toml\n", 1)[1].split("```", 1)[0]
    rules = load_rules(_write(tmp_path, example))
    assert categorize("my_custom_attn_fwd", rules) == "attention"
    assert categorize("saxpy(double *, double *, double *, double, int)", rules) == "elementwise"
    assert categorize("ampere_sgemm_128x64_tn", rules) == "other"


# ---- TorchInductor kernels: what they fused, read from the name (reports.render.inductor) -------
@pytest.mark.parametrize("name, ops", [
    ("triton_poi_fused_add_mul_0", ("add", "mul")),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1",
     ("to_copy", "add", "mean", "mul", "pow", "rsqrt")),
    ("triton_per_fused__softmax_1", ("softmax",)),
    ("triton_tem_fused_mm_2", ("mm",)),
    ("triton_per_fused_native_layer_norm_0", ("native_layer_norm",)),
    ("triton_per_fused__log_softmax_nll_loss_forward_1", ("log_softmax", "nll_loss_forward")),
    ("triton_red_fused_embedding_dense_backward_2", ("embedding_dense_backward",)),
    ("triton_poi_fused__unsafe_view_clone_3", ("unsafe_view", "clone")),
    ("triton_poi_fused__my_op_add_7", ("my", "op", "add")),  # unknown: split at underscores
    ("triton_poi_fused_add_add_4", ("add",)),
    ("triton_poi_fused_0", None),  # descriptive names off: nothing to say
    ("triton_for_fused_0", None),
    ("ampere_sgemm_128x64_tn", None),
    ("void at::native::elementwise_kernel<triton_poi_fused_add_0>", None),
])
def test_inductor_fused_operators(name, ops):
    from reports.render.inductor import display, fused_ops

    assert fused_ops(name) == ops
    assert display(name) == (name if ops is None else f"{name} · fused: {', '.join(ops)}")


def test_inductor_names_shortened_keep_the_label():
    from reports.render.inductor import display, shortened

    shown = display("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1")
    assert [shortened(shown, w) for w in (90, 50, 30, 16, 10)] == [
        "triton_red_…_1 · fused: to_copy, add, mean, mul, pow, rsqrt",
        "red_1 · to_copy, add, mean, mul, pow, rsqrt",
        "red_1 · to_copy, add, mean, m…",
        "red_1 · to_copy…",
        None]
    assert shortened("ampere_sgemm_128x64_tn", 10) is None
