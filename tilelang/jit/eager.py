"""The eager ``@tilelang.jit`` style: the decorated function *is* the kernel.

    @tilelang.jit
    def matmul(A, B, block_M: int = 128):
        M, N, K = T.const("M, N, K")        # sizes of the compiled kernel
        A: T.Tensor((M, K), T.float16)       # A and B are tensor parameters
        B: T.Tensor((K, N), T.float16)
        C = T.empty((M, N), T.float16)       # an output the call allocates
        with T.Kernel(...): ...
        return C

Parameters typed inside the body (or in the signature with ``T.Tensor``) are the kernel's
tensors; every other parameter is a Python value fixed at compile time.  A call binds the
``T.const`` sizes from the tensors' shapes, picks the target from their device, compiles once
per distinct (values, sizes, target) and runs the kernel, returning what the body returns.
``.compile(**values_and_sizes)`` compiles without tensors.

The body is parsed by TVMScript as the body of a ``T.prim_func`` whose parameters are declared
where the annotations stand (``T.arg``).  To bind sizes, the statements up to the last tensor
annotation first run as plain Python with ``T.const`` giving size variables.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
from typing import Any, Callable, Sequence

import torch
import tvm
from tvm import tirx
from tvm.error import DiagnosticError
from tvm.script.ir_builder import IRBuilder
from tvm.script.parser.core import doc
from tvm.script.parser.core import utils as _utils
from tvm.script.parser.core.diagnostics import Source
from tvm.script.parser.core.error import ParserError
from tvm.script.parser.core.parser import Parser
from tvm.tirx.buffer import is_buffer_var

from ..errors import DSLError, DSLTypeError, KernelArgumentError
from .binding import CallBinding, key_value, tensors_key
from .params import logical_layout
from ..language import eager as _lang
from ..language import parser as _parser
from ..language.loop import clear_pending

_PARAM, _RETURN, _PRIM_FUNC = "__tl_param", "__tl_return", "__tl_prim_func"


def is_eager(fn: Callable) -> bool:
    """Whether ``fn`` is written in the eager style: it types a parameter inside its body or
    with a ``T.Tensor`` annotation in its signature, or calls ``T.const`` / ``T.empty`` /
    ``T.Kernel`` in its own body.  A function that builds and returns a ``T.prim_func`` is
    not."""
    if any(is_buffer_var(a) for a in getattr(fn, "__annotations__", {}).values()):
        return True
    tree = _function_ast(fn)
    if tree is None:
        return False
    params = set(inspect.signature(fn).parameters)
    if _body_annotations(tree, params):
        return True
    # T.const / T.empty, or a kernel written in the body itself (``with T.Kernel(...)`` not
    # inside a nested T.prim_func)
    return any(_is_t_call(n, ("const", "empty", "Kernel")) for n in _walk_own(tree))


class EagerJITFunction:
    """An eager kernel function: call it with tensors, or ``.compile`` it by sizes."""

    mode = "eager"

    def __init__(self, fn: Callable, options: dict):
        self.fn = fn
        self.options = options
        self.signature = inspect.signature(fn)
        self._source = Source(fn)
        self._tree = _function_ast(fn)
        names = list(self.signature.parameters)
        in_body = _body_annotations(self._tree, set(names))
        self._sig_tensors = {n: a for n, a in fn.__annotations__.items() if is_buffer_var(a)}
        self.tensor_params = [n for n in names if n in in_body or n in self._sig_tensors]
        self.value_params = [n for n in names if n not in self.tensor_params]
        self.func = CallBinding(fn, self.tensor_params, mode="eager")
        self._probe_fn = self._make_probe()
        self._call_form_cache: dict = {}   # by values and tensor key: (kernel, returns)
        self._kernel_cache: dict = {}      # by values, sizes and target

    # public surface -------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values, tensors, consts = self._split(args, kwargs, require_tensors=True)
        key = (key_value(values), tensors_key(tensors))
        hit = self._call_form_cache.get(key)
        if hit is None:
            consts.update(self._bind_sizes(values, tensors))
            hit = self._kernel(values, consts, self._target(tensors))
            self._call_form_cache[key] = hit
        kernel, n_returned, single = hit
        outs = kernel(*tensors.values())
        if n_returned == 0:
            return None
        outs = outs if isinstance(outs, tuple) else (outs,)
        return outs[0] if single else tuple(outs[:n_returned])

    def compile(self, *args: Any, **kwargs: Any):
        """The compiled kernel for these values and sizes (keyword arguments that are not
        parameters of the function name ``T.const`` sizes); tensors given bind sizes too.
        The kernel takes the tensor parameters in signature order and returns the outputs."""
        values, tensors, consts = self._split(args, kwargs, require_tensors=False)
        consts.update(self._bind_sizes(values, tensors))
        return self._kernel(values, consts, self._target(tensors))[0]

    def get_tir(self, *args: Any, **kwargs: Any) -> tirx.PrimFunc:
        """The ``T.prim_func`` these arguments build (tensors, ``T.Tensor(shape, dtype)``
        placeholders or sizes by name), before compilation."""
        values, tensors, consts = self._split(args, kwargs, require_tensors=False)
        consts.update(self._bind_sizes(values, tensors))
        return self._build(values, consts)[0]

    def get_kernel_source(self, *args: Any, **kwargs: Any) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()

    def program(self, *args: Any, **kwargs: Any) -> tuple[tirx.PrimFunc, dict]:
        """The ``T.prim_func`` these arguments build and the ``tilelang.compile`` keywords
        ``.compile`` would use for it (its outputs as ``out_idx``, the target the tensors'
        device gives); for tools that compile it themselves, like the autotuner."""
        values, tensors, consts = self._split(args, dict(kwargs), require_tensors=False)
        consts.update(self._bind_sizes(values, tensors))
        func, n_outputs = self._build(values, consts)[:2]
        n = len(func.params)
        opts = {k: v for k, v in self.options.items() if k not in ("out_idx", "target")}
        return func, dict(opts, out_idx=list(range(n - n_outputs, n)),
                          target=self._target(tensors))

    def par_compile(self, configs: Sequence, num_workers: int | None = None,
                    ignore_error: bool = False) -> list:
        """``.compile`` each configuration (a dict of keyword arguments or a tuple of
        positional ones); ``ignore_error`` gives ``None`` for those that fail."""
        from .par_compile import compile_each

        return compile_each(self.compile, configs, ignore_error)

    def clear_cache(self) -> None:
        self._call_form_cache.clear()
        self._kernel_cache.clear()

    # arguments ------------------------------------------------------------------------
    def _split(self, args, kwargs, require_tensors: bool):
        """(values of the Python parameters, the tensor arguments given, sizes by name)."""
        params = self.signature.parameters
        consts = {} if self.func.takes_var_keyword else \
            {k: kwargs.pop(k) for k in list(kwargs) if k not in params}
        if require_tensors and consts:
            raise TypeError(f"{self.fn.__name__}() got unexpected keyword arguments "
                            f"{sorted(consts)}")
        bound = (self.signature.bind if require_tensors else self.signature.bind_partial)(
            *args, **kwargs)
        for name, p in params.items():  # defaults of the Python parameters
            if name not in bound.arguments and name in self.value_params \
                    and p.default is not inspect.Parameter.empty:
                bound.arguments[name] = p.default
        missing = [n for n in self.value_params if n not in bound.arguments
                   and params[n].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                              inspect.Parameter.VAR_KEYWORD)]
        if missing:
            raise TypeError(f"{self.fn.__name__}(): missing the compile-time argument(s) "
                            f"{missing}")
        values = {n: bound.arguments[n] for n in self.value_params if n in bound.arguments}
        tensors = {n: bound.arguments[n] for n in self.tensor_params if n in bound.arguments}
        return values, tensors, consts

    def _target(self, tensors: dict) -> Any:
        target = self.options.get("target", "auto")
        if target not in (None, "auto"):
            return target
        devices = {t.device.type for t in tensors.values() if isinstance(t, torch.Tensor)}
        if "cuda" in devices:
            return "cuda"
        return "cpu" if devices else "auto"

    def _bind_sizes(self, values: dict, tensors: dict) -> dict[str, int]:
        """The ``T.const`` sizes the given tensors' shapes determine."""
        if not tensors or self._probe_fn is None:
            return {}
        scope = _lang.EagerScope(consts=None)
        declared: dict[str, Any] = {}
        with _lang.eager_scope(scope):
            self._probe_fn(declared, **values)
        consts: dict[str, int] = {}
        for name, tensor in tensors.items():
            buf = declared.get(name)
            shape = getattr(tensor, "shape", None)
            if buf is None or shape is None:
                continue
            dims = list(buf.shape)
            if len(dims) != len(shape):
                raise KernelArgumentError(
                    f"{self.fn.__name__}: parameter {name!r} is declared with {len(dims)} "
                    f"dimensions, got a tensor of shape {tuple(int(s) for s in shape)}")
            shape, strides = logical_layout(buf.dtype, tensor)
            named = [(f"dimension {d}", decl, got) for d, (decl, got) in enumerate(zip(dims, shape))]
            if len(buf.strides) and strides is not None:  # T.StridedTensor: strides bind too
                named += [(f"stride {d}", decl, got)
                          for d, (decl, got) in enumerate(zip(buf.strides, strides))]
            for where, decl, got in named:
                got = int(got)
                probed = scope.probed.get(getattr(decl, "name", None))
                if isinstance(decl, tirx.Var) and probed is not None and probed.same_as(decl):
                    if consts.setdefault(decl.name, got) != got:
                        raise KernelArgumentError(
                            f"{self.fn.__name__}: size {decl.name} is {consts[decl.name]} from "
                            f"an earlier tensor but {got} from {where} of {name!r}")
        return consts

    # building -------------------------------------------------------------------------
    def _kernel(self, values: dict, consts: dict, target: Any):
        from . import compile as _compile

        key = (key_value(values), tuple(sorted(consts.items())), str(target))
        hit = self._kernel_cache.get(key)
        if hit is None:
            func, n_outputs, n_returned, single = self._build(values, consts)
            n = len(func.params)
            opts = {k: v for k, v in self.options.items() if k not in ("out_idx", "target")}
            kernel = _compile(func, out_idx=list(range(n - n_outputs, n)), target=target, **opts)
            hit = (kernel, n_returned, single)
            self._kernel_cache[key] = hit
        return hit

    def _build(self, values: dict, consts: dict):
        """(prim_func, number of outputs, number returned, whether one is returned bare)."""
        scope = _lang.EagerScope(consts=dict(consts))
        returned: list = []
        declared: dict[str, Any] = {}

        def param(name: str, annotation: Any = None):
            from tvm.script import tirx as _T

            ann = self._sig_tensors[name] if annotation is None else annotation
            if not is_buffer_var(ann):
                raise DSLTypeError(f"{self.fn.__name__}: parameter {name!r} is annotated with "
                                   f"{ann!r}; expected T.Tensor(shape, dtype)")
            declared[name] = _T.arg(name, ann)
            return declared[name]

        def ret(value: Any = None):
            returned.append(value)

        extra = {**_utils.inspect_function_capture(self.fn), **values,
                 _PARAM: param, _RETURN: ret, _PRIM_FUNC: _parser.prim_func}
        tree = _BuildTransform(self.tensor_params, self._sig_tensors).visit(
            copy.deepcopy(self._tree))
        with _lang.eager_scope(scope):
            func = _parse(self._source, ast.fix_missing_locations(tree), extra)
        unused = set(consts) - set(scope.probed) - set(scope.used)
        if unused:
            raise TypeError(f"{self.fn.__name__}: {sorted(unused)} are neither parameters nor "
                            f"T.const sizes of the function")
        outs = returned[-1] if returned else None
        outs = [] if outs is None else outs
        single = not isinstance(outs, (tuple, list))
        outs = [outs] if single else list(outs)
        for o in outs:
            if not _is_one_of(o, scope.outputs):
                raise DSLError(f"{self.fn.__name__}: returns {o!r}; an eager kernel returns "
                               f"the tensors it makes with T.empty")
        ordered_outs = outs + [b for b in scope.outputs if not _is_one_of(b, outs)]
        inputs = [declared[n] for n in self.tensor_params if n in declared]
        params = inputs + ordered_outs
        if len(params) != len(func.params):  # a parameter declared somewhere else
            raise DSLError(f"{self.fn.__name__}: tensor parameters must be declared at the "
                           f"top level of the body")
        func = tirx.PrimFunc(params, func.body, func.ret_type, func.attrs, func.span)
        return func, len(scope.outputs), len(outs), single and bool(outs)

    def _make_probe(self):
        """A plain-Python function running the statements up to the last tensor annotation,
        recording each annotation's tensor type: ``probe(declared, **values)``."""
        body = self._tree.body
        last = max((i for i, s in enumerate(body) if _annotated_name(s, self.tensor_params)),
                   default=-1)
        if last < 0:
            return None
        stmts = []
        for s in copy.deepcopy(body[: last + 1]):
            name = _annotated_name(s, self.tensor_params)
            if name is not None:
                s = ast.copy_location(ast.Expr(ast.Call(
                    ast.Attribute(ast.Name("__tl_declared", ast.Load()), "__setitem__",
                                  ast.Load()),
                    [ast.Constant(name), s.annotation], [])), s)
            stmts.append(s)
        args = ast.arguments(posonlyargs=[], args=[ast.arg("__tl_declared")],
                             kwonlyargs=[ast.arg(n) for n in self.value_params],
                             kw_defaults=[None] * len(self.value_params), defaults=[],
                             vararg=None, kwarg=None)
        fdef = ast.FunctionDef("__tl_probe", args, stmts + [ast.Pass()], [], None,
                               type_params=[]) if _HAS_TYPE_PARAMS else \
            ast.FunctionDef("__tl_probe", args, stmts + [ast.Pass()], [], None)
        mod = ast.fix_missing_locations(ast.Module([ast.copy_location(fdef, self._tree)], []))
        ast.increment_lineno(mod, self._source.start_line - 1)
        scope = dict(_utils.inspect_function_capture(self.fn))
        exec(compile(mod, self._source.source_name, "exec"), scope)  # noqa: S102
        return scope["__tl_probe"]


_HAS_TYPE_PARAMS = "type_params" in ast.FunctionDef._fields


class _BuildTransform(ast.NodeTransformer):
    """The eager function as the body of a parameterless ``T.prim_func``: tensor annotations
    become parameter declarations, the final ``return`` a recorded value."""

    def __init__(self, tensor_params: list[str], sig_tensors: dict):
        self.tensor_params = tensor_params
        self.sig_tensors = sig_tensors

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        body = []
        for name in self.tensor_params:  # typed in the signature: declared first
            if name in self.sig_tensors:
                body.append(ast.copy_location(_assign(name, _call(_PARAM, ast.Constant(name))),
                                              node))
        for s in node.body:
            name = _annotated_name(s, self.tensor_params)
            if name is not None:
                s = ast.copy_location(
                    _assign(name, _call(_PARAM, ast.Constant(name), s.annotation)), s)
            elif isinstance(s, ast.Return):
                s = ast.copy_location(ast.Expr(_call(_RETURN, *([s.value] if s.value else []))),
                                      s)
            elif isinstance(s, ast.Assign) and len(s.targets) == 1 \
                    and isinstance(s.targets[0], ast.Name) and _is_t_call(s.value, ("empty",)):
                s.value.keywords.append(ast.keyword("name", ast.Constant(s.targets[0].id)))
            body.append(s)
        node.body = body
        node.args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                  defaults=[], vararg=None, kwarg=None)
        node.decorator_list = [ast.Name(_PRIM_FUNC, ast.Load())]
        node.returns = None
        return node


def _parse(source: Source, tree: ast.Module, extra_vars: dict) -> tirx.PrimFunc:
    """Parse ``tree`` (the transformed function) with TVMScript, with errors and
    post-processing as ``T.prim_func`` has them."""

    class _Transformed(Source):
        def __init__(self):
            self.__dict__.update(source.__dict__)

        def as_ast(self):
            return doc.to_doc(tree)

    clear_pending()
    _parser.eager_results.clear()
    try:
        with _constant_sizes_stay_values(), _parser.scalar_bindings() as bindings:
            func = _run_parser(_Transformed(), extra_vars)
        func = _parser.after_parse(func)
    except DiagnosticError as err:
        cause = _parser._root_cause(err)
        kind = DSLTypeError if isinstance(cause, TypeError) else DSLError
        dsl = kind(_parser._message(err))
        dsl.cause = cause
        raise dsl from None
    finally:
        clear_pending()
    _parser.check_parsed(func, bindings)
    return func


def _run_parser(source: Source, extra_vars: dict) -> tirx.PrimFunc:
    parser = Parser(source, {})
    with IRBuilder() as builder:
        try:
            parser.parse(extra_vars=extra_vars)
        except ParserError as err:
            parser.report_error(err.node, err.args[0])
    return builder.get()


@contextlib.contextmanager
def _constant_sizes_stay_values():
    """While an eager body is parsed, a name bound to a constant integer (``M, N = A.shape``
    of a static tensor) stays that constant, as in the public TileLang, instead of becoming a
    scalar variable of the kernel (TVMScript's rule for ``x = <expr>``)."""
    from tvm.tirx.script.parser import parser as tvm_parser

    original = tvm_parser.bind_assign_value

    def bind(self, node, var_name, value, *args, **kwargs):
        if isinstance(value, tirx.IntImm):
            return value
        return original(self, node, var_name, value, *args, **kwargs)

    tvm_parser.bind_assign_value = bind
    try:
        with _macros_return_values():
            yield
    finally:
        tvm_parser.bind_assign_value = original


@contextlib.contextmanager
def _macros_return_values():
    """While an eager body is parsed, ``return x`` in a ``T.macro`` makes the macro call
    evaluate to ``x`` (``return copy_impl(A)``), as in the public TileLang; TVMScript's own
    macros would emit a return statement into the kernel."""
    from tvm.script.parser.core import dispatch
    from tvm.tirx.script.parser.entry import TIRMacro

    frames: list[list] = []
    key = ("tirx", "Return")
    original_return = dispatch.ParseVTable[key]
    original_parse = TIRMacro.parse_macro

    def visit_return(self, node):
        if not frames:
            return original_return(self, node)
        frames[-1].append(self.eval_expr(node.value) if node.value is not None else None)

    def parse_macro(self, parser):
        frames.append([])
        try:
            original_parse(self, parser)
            values = frames[-1]
        finally:
            frames.pop()
        return values[0] if values else None

    dispatch.ParseVTable[key] = visit_return
    TIRMacro.parse_macro = parse_macro
    try:
        yield
    finally:
        dispatch.ParseVTable[key] = original_return
        TIRMacro.parse_macro = original_parse


def _function_ast(fn: Callable) -> ast.FunctionDef | None:
    try:
        source = Source(fn).source
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, ast.FunctionDef) else None


def _annotated_name(stmt: ast.stmt, names) -> str | None:
    """``name`` for a bare annotation ``name: <type>`` of one of ``names``."""
    if isinstance(stmt, ast.AnnAssign) and stmt.value is None \
            and isinstance(stmt.target, ast.Name) and stmt.target.id in names:
        return stmt.target.id
    return None


def _body_annotations(tree: ast.FunctionDef, params: set) -> set:
    return {n for s in tree.body if (n := _annotated_name(s, params)) is not None}


def _walk_own(tree: ast.FunctionDef):
    """The nodes of ``tree``'s body, not descending into nested functions or classes."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    todo = [n for n in tree.body if not isinstance(n, nested)]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, nested))


def _is_t_call(node: ast.AST, attrs: tuple) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr in attrs and isinstance(node.func.value, ast.Name)


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), list(args), [])


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign([ast.Name(name, ast.Store())], value)


def _is_one_of(value: Any, buffers: list) -> bool:
    return hasattr(value, "same_as") and any(value.same_as(b) for b in buffers)


__all__ = ["EagerJITFunction", "is_eager"]
