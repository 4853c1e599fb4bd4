#!/usr/bin/env python3
"""Writes shared/ml/ScriptOperators.inc, the operators a TorchScript model may call on Gleaner.

An allowlist, not a denylist: an operator that is not written here is refused by the coordinator at submit and by
every agent before the first forward pass. It is drawn once from the operators python3-torch registers (Debian
12: 1.13.1), kept to pure tensor computation, and committed; rerun it only to review a new libtorch's operators:

    /usr/bin/python3 tests/tools/torchscript_operators.py > shared/ml/ScriptOperators.inc

Left out, by name: anything that reads or writes files, storage or raw memory (from_file, save, set_, as_strided,
data_ptr, empty: uninitialised memory, _unsafe_view, resize_), threads, seeds and other process-wide state, printing (prim::Print
writes to the worker's standard output, its event channel; aten::warn, which nn.functional calls in many places,
goes to the log and stays), profiling,
asynchronous work (fork, wait), device-specific kernels (cuda, cudnn, mkldnn, ...), quantized and sparse
tensors, autograd internals (backward functions), and operators of every namespace but aten and prim; of prim, only the explicit list below.
Then, one by one (REMOVED below, each with its reason): every operator left that trusts a size, stride, offset,
storage or index from the program without checking it, found by calling each on CPU with hostile arguments.
"""
import torch

DENY = ['file', 'save', 'load', 'storage', 'set_', 'as_strided', 'data_ptr', 'empty', 'unsafe', 'resize',
        'from_blob', 'thread', 'seed', 'generator', 'manual', 'print', 'sleep', 'profil', 'record',
        'fork', 'wait', 'async', 'rpc', 'local_scalar', 'version', 'debug', 'vitals', 'tracing',
        'cuda', 'cudnn', 'miopen', 'mkldnn', 'mkl', 'nnpack', 'xnnpack', 'fbgemm', 'vulkan', 'metal', 'mps',
        'tensorrt', 'triton', 'flash', 'pin_memory', 'share_memory', 'is_pinned', 'cpu', 'device', 'get_device',
        'quantiz', 'q_', 'qscheme', 'int_repr', 'dequant', 'fake_', 'sparse', 'coalesce', 'indices', 'values',
        'crow', 'ccol', 'to_dense', 'to_padded', 'nested', 'foreach', 'fused', 'amp', 'autocast', 'thnn',
        'backward', 'grad', 'dual', 'jvp', 'fw_primal', 'lift', 'functionalize', 'sym_', 'batch_dim', '_test',
        'foobar', 'sobol', 'cufft', 'retain']

# Nodes without a schema: the structure of a TorchScript program. Left out: prim::Print, prim::PythonOp, the
# fusion and profiling groups, prim::Enter/Exit, prim::id.
STRUCTURE = ['prim::Constant', 'prim::GetAttr', 'prim::SetAttr', 'prim::If', 'prim::Loop', 'prim::Return',
             'prim::ListConstruct', 'prim::ListUnpack', 'prim::TupleConstruct', 'prim::TupleUnpack',
             'prim::TupleIndex', 'prim::TupleSlice', 'prim::DictConstruct', 'prim::DictIndex',
             'prim::CallMethod', 'prim::CallFunction', 'prim::CreateObject', 'prim::RaiseException',
             'prim::Uninitialized', 'prim::unchecked_cast', 'prim::unchecked_unwrap_optional', 'prim::isinstance',
             'prim::NumToTensor', 'prim::ImplicitTensorToNum', 'prim::AutogradZero', 'prim::AutogradAdd',
             'prim::EnumName', 'prim::EnumValue', 'prim::StringIndex', 'prim::ModuleContainerIndex',
             'prim::dtype', 'prim::device', 'prim::layout', 'prim::shape', 'prim::requires_grad', 'prim::is_cuda',
             'prim::data', 'prim::index', 'prim::min', 'prim::max', 'prim::abs', 'prim::tolist', 'prim::rangelist',
             'prim::name', 'prim::type', 'prim::add_optional', 'prim::infer_squeeze_size',
             'prim::infer_unsqueeze_size', 'prim::BroadcastSizes', 'prim::ChunkSizes', 'prim::ConstantChunk',
             'prim::IfThenElse', 'prim::VarConcat', 'prim::VarStack', 'prim::is_meta', 'prim::is_xpu',
             'prim::is_ipu', 'prim::is_ort', 'prim::is_sparse', 'prim::is_quantized', 'prim::is_mkldnn',
             'prim::is_nested', 'prim::is_vulkan', 'prim::is_mps']
# Operators the filters above leave out that scripted nn modules emit, named one by one.
PRIVATE = ['aten::_convolution', 'aten::_convolution_mode', 'aten::_pack_padded_sequence',
           'aten::_pad_packed_sequence', 'aten::_log_softmax', 'aten::_softmax', 'aten::_shape_as_tensor',
           'aten::_reshape_from_tensor', 'aten::_unique2', 'aten::_dim_arange', 'aten::_to_copy',
           'aten::_batch_norm_impl_index', 'aten::_embedding_bag', 'aten::_embedding_bag_forward_only',
           'aten::_infer_size', 'aten::_stack', 'aten::_add_relu',
           'aten::_unwrap_optional', 'aten::_list_to_tensor', 'aten::_tensor_to_list', 'aten::_masked_softmax',
           'aten::_native_multi_head_attention',
           'aten::_scaled_dot_product_attention', 'aten::_scaled_dot_product_attention_math',
           'aten::_adaptive_avg_pool2d', 'aten::_aminmax', 'aten::_cast_Float', 'aten::_cast_Long',
           'aten::_cast_Int', 'aten::_cast_Double', 'aten::_cast_Half', 'aten::_cast_Byte', 'aten::_cast_Char',
           'aten::_cast_Short', 'aten::_set_item', 'aten::_ncf_unsqueeze', 'aten::_ncf_view', 'aten::_trilinear',
           'aten::_cdist_forward', 'aten::_pdist_forward', 'aten::_euclidean_dist',
           # nn.TransformerEncoder's inference fast path: the fused layer, the nested tensor it builds from the
           # padding mask and back, and the two queries that choose it.
           'aten::_transformer_encoder_layer_fwd', 'aten::_nested_tensor_from_mask', 'aten::to_padded_tensor',
           'aten::_nested_tensor_from_mask_left_aligned', 'aten::is_grad_enabled', 'aten::is_autocast_enabled',
           'aten::is_autocast_cpu_enabled']

# Operators the filters above let through that take a size, stride, offset, storage or index from the program and
# trust it: each was called on CPU with hostile arguments in a subprocess under python3-torch 1.13.1 (the audit of
# docs/your-model.md). A crash or a read or write outside the tensor's storage removes an operator, whatever its
# usefulness. What stays was tried the same way and refused the argument with an error: view, reshape, expand and
# unflatten check numel and sizes; narrow, select, slice, unfold, diagonal and split clamp or bounds-check;
# index, index_select, index_put, index_add/copy/fill/reduce, gather, scatter*, take, put, take_along_dim,
# embedding and embedding_bag bounds-check every index on CPU; nll_loss, cross_entropy_loss and
# multilabel_margin_loss check targets; max_unpool checks its indices; lu_solve and lu_unpack check pivots;
# batch_norm, instance_norm, layer_norm and group_norm check their weights and running statistics;
# _native_multi_head_attention and _transformer_encoder_layer_fwd check their weights and masks;
# _nested_tensor_from_mask, _masked_softmax and to_padded_tensor check the mask and output sizes.
REMOVED = {
    'aten::_reshape_alias': 'takes sizes and strides and never checks them against the storage: '
                            '_reshape_alias(t, [2], [1 << 40]) reads 4 TiB past it (segmentation fault)',
    'aten::set': 'the functional form of set_: points a tensor at a storage with a caller-given offset, sizes '
                 'and strides',
    'aten::rrelu_with_noise': 'writes a noise value per input element into a noise tensor of any size '
                              '(segmentation fault with a 1-element noise tensor); rrelu draws its own and stays',
    'aten::rrelu_with_noise_': 'as rrelu_with_noise, in place',
    'aten::segment_reduce': 'trusts lengths and offsets (segmentation fault with offsets [0, 1 << 30]) and '
                            'takes an unsafe flag that skips the rest of its checks',
    'aten::searchsorted': "indexes the sorted sequence with the sorter's values unchecked (segmentation fault "
                          'with a sorter of 1 << 40); bucketize, without a sorter, stays',
    'aten::ctc_loss': 'indexes the log-probabilities with the target values unchecked (segmentation fault '
                      'with a target of 1 << 40)',
    'aten::_ctc_loss': 'as ctc_loss',
    'aten::linalg_ldl_solve': "swaps rows by the caller's pivots unchecked (segmentation fault with a pivot "
                              'of 1 << 30)',
    'aten::native_batch_norm': 'does not check the sizes of weight, bias and running statistics against the '
                               'channels (abort, and reads past a 1-element weight); batch_norm checks and stays',
    'aten::batch_norm_update_stats': "does not check the running statistics' size (segmentation fault)",
    'aten::batch_norm_elemt': 'synchronised batch norm: a CUDA kernel, none on CPU',
    'aten::batch_norm_stats': 'synchronised batch norm: a CUDA kernel, none on CPU',
    'aten::batch_norm_gather_stats': 'synchronised batch norm: a CUDA kernel, none on CPU',
    'aten::batch_norm_gather_stats_with_counts': 'synchronised batch norm: a CUDA kernel, none on CPU',
    'aten::conv_depthwise3d': 'a CUDA kernel, none on CPU',
    'aten::lstm_cell': "does not check the gate weights' height: a weight of 1 row gives fewer gate chunks "
                       'than it reads (segmentation fault)',
    'aten::gru_cell': 'as lstm_cell',
    'aten::native_channel_shuffle': 'does not check groups (division by zero with 1 << 20 groups of 4 '
                                    'channels); channel_shuffle checks and stays',
    'aten::pixel_shuffle': 'the upscale factor squared overflows (division by zero with 1 << 32)',
    'aten::bincount': 'the largest value plus one overflows (segmentation fault with 2**63 - 1)',
    'aten::_pad_circular': 'negative circular padding reads before the input (garbage values with [-5, 2] on '
                           '4 elements); aten::pad stays for every mode but circular (checked at load)',
    'aten::_pad_enum': 'as _pad_circular, with the mode as a number',
    'aten::multi_margin_loss': "indexes its weight by target without checking the weight's size (reads past "
                               'a 1-element weight)',
    'aten::_transform_bias_rescale_qkv': "does not check the bias's size (reads past a 1-element bias); "
                                         '_native_multi_head_attention checks before it calls it',
    'aten::_weight_norm': "does not check g's size against v (segmentation fault)",
    'aten::_weight_norm_interface': 'as _weight_norm',
    'aten::fractional_max_pool2d': 'takes its random samples from the caller and does not check their shape '
                                   'against the batch and planes it indexes them by',
    'aten::fractional_max_pool3d': 'as fractional_max_pool2d',
    'aten::choose_qparams_optimized': 'quantization, and takes an element count from the caller',
    'aten::hspmm': 'sparse tensors',
    'aten::smm': 'sparse tensors',
    'aten::sspaddmm': 'sparse tensors',
    'aten::to_here': 'remote references (RPC)',
    'aten::local_value': 'remote references (RPC)',
    'aten::owner': 'remote references (RPC); returns a TorchBind object',
    'aten::owner_name': 'remote references (RPC)',
    'aten::is_owner': 'remote references (RPC)',
    'aten::confirmed_by_owner': 'remote references (RPC)',
}

names = set()
for schema in torch._C._jit_get_all_schemas():
    ns, op = schema.name.split('::', 1)
    if ns != 'aten':  # prim: only the explicit list below
        continue
    if op.startswith('_') and not (op.startswith('__') and op.endswith('__')):
        continue
    if any(word in op.lower() for word in DENY):
        continue
    names.add(schema.name)
names.update(STRUCTURE)
names.update(n for n in PRIVATE if not any(w in n for w in ('cuda', 'file')))
registered = {schema.name for schema in torch._C._jit_get_all_schemas()}
assert set(REMOVED) <= registered, 'not an operator of this libtorch: %s' % sorted(set(REMOVED) - registered)
names.difference_update(REMOVED)
print('// Written by tests/tools/torchscript_operators.py from python3-torch %s: see that script for how it was '
      'chosen.' % torch.__version__)
for name in sorted(names):
    print('"%s",' % name)
