#!/usr/bin/env python3
"""Writes shared/ml/ScriptOperators.inc, the operators a TorchScript model may call on Gleaner.

An allowlist, not a denylist: an operator that is not written here is refused by the coordinator at submit and by
every agent before the first forward pass. It is drawn once from the operators python3-torch registers (Debian
12: 1.13.1), kept to pure tensor computation, and committed; rerun it only to review a new libtorch's operators:

    /usr/bin/python3 tests/tools/torchscript_operators.py > shared/ml/ScriptOperators.inc

Left out, by name: anything that reads or writes files, storage or raw memory (from_file, save, set_, as_strided,
data_ptr, empty: uninitialised memory), threads, seeds and other process-wide state, printing (prim::Print
writes to the worker's standard output, its event channel; aten::warn, which nn.functional calls in many places,
goes to the log and stays), profiling,
asynchronous work (fork, wait), device-specific kernels (cuda, cudnn, mkldnn, ...), quantized and sparse
tensors, autograd internals (backward functions), and operators of every namespace but aten and prim; of prim, only the explicit list below.
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
           'aten::_reshape_alias', 'aten::_batch_norm_impl_index', 'aten::_embedding_bag',
           'aten::_embedding_bag_forward_only', 'aten::_weight_norm', 'aten::_weight_norm_interface',
           'aten::_infer_size', 'aten::_pad_enum', 'aten::_pad_circular', 'aten::_stack', 'aten::_add_relu',
           'aten::_unwrap_optional', 'aten::_list_to_tensor', 'aten::_tensor_to_list', 'aten::_masked_softmax',
           'aten::_native_multi_head_attention', 'aten::_transform_bias_rescale_qkv',
           'aten::_scaled_dot_product_attention', 'aten::_scaled_dot_product_attention_math',
           'aten::_adaptive_avg_pool2d', 'aten::_aminmax', 'aten::_cast_Float', 'aten::_cast_Long',
           'aten::_cast_Int', 'aten::_cast_Double', 'aten::_cast_Half', 'aten::_cast_Byte', 'aten::_cast_Char',
           'aten::_cast_Short', 'aten::_set_item', 'aten::_ncf_unsqueeze', 'aten::_ncf_view', 'aten::_trilinear',
           'aten::_cdist_forward', 'aten::_pdist_forward', 'aten::_euclidean_dist', 'aten::_ctc_loss',
           # nn.TransformerEncoder's inference fast path: the fused layer, the nested tensor it builds from the
           # padding mask and back, and the two queries that choose it.
           'aten::_transformer_encoder_layer_fwd', 'aten::_nested_tensor_from_mask', 'aten::to_padded_tensor',
           'aten::_nested_tensor_from_mask_left_aligned', 'aten::is_grad_enabled', 'aten::is_autocast_enabled',
           'aten::is_autocast_cpu_enabled']

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
print('// Written by tests/tools/torchscript_operators.py from python3-torch %s: see that script for how it was '
      'chosen.' % torch.__version__)
for name in sorted(names):
    print('"%s",' % name)
