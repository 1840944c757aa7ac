"""What one vLLM, SGLang or LMCache release accepts, read from its source with ``ast``.

Each reader names the file it reads; docs/testing.md ("Engine contracts") lists them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.engine_contracts.source import (
    UNRESOLVED,
    Flag,
    SourceTree,
    calls_named,
    first_string_arg,
)

# ------------------------------------------------------------------------------- vLLM

VLLM_ARG_UTILS = "vllm.engine.arg_utils"
VLLM_KV_TRANSFER = "vllm.config.kv_transfer"
VLLM_KV_EVENTS = "vllm.config.kv_events"
VLLM_FACTORY = "vllm.distributed.kv_transfer.kv_connector.factory"
VLLM_EVENTS = "vllm.distributed.kv_events"
VLLM_ENVS = "vllm.envs"
# Where ``vllm serve`` keeps its frontend flags (--host, --port ...), by release.
VLLM_FRONTEND = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.common.cli_args")


@dataclass(frozen=True)
class JsonConfig:
    """A config class a JSON-valued flag is parsed into: field -> annotation text."""

    name: str
    fields: dict[str, str]
    # field -> the values a Literal annotation allows
    choices: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class VllmSurface:
    version: str
    flags: dict[str, Flag]
    json_flags: dict[str, JsonConfig]
    connectors: frozenset[str]
    publishers: frozenset[str]
    envs: frozenset[str]
    # VLLM_* variable -> "int" / "float" when envs.py converts it so, else "str".
    env_types: dict[str, str]
    tree: SourceTree


def _vllm_flag_type(annotation: str) -> tuple[bool, str]:
    """(takes a value, type) of an EngineArgs field, as vLLM's ``_compute_kwargs``
    derives it (arg_utils.py): dataclass configs parse JSON, bool becomes a
    ``--x/--no-x`` pair, then int, float, dict (JSON), else str."""
    if re.search(r"\b\w+Config\b", annotation) or "dict" in annotation.lower():
        return True, "json"
    if re.search(r"\bbool\b", annotation):
        return False, "bool"
    if re.search(r"\bint\b", annotation):
        return True, "int"
    if re.search(r"\bfloat\b", annotation):
        return True, "float"
    return True, "str"


def _json_config(tree: SourceTree, module: str, cls: str) -> JsonConfig:
    fields = tree.class_fields(module, cls)
    choices = {}
    for name, annotation in fields.items():
        values = tree.literal_choices(module, annotation)
        if values:
            choices[name] = frozenset(values)
    return JsonConfig(cls, {k: ast.unparse(v) for k, v in fields.items()}, choices)


def read_vllm(root: Path, version: str) -> VllmSurface:
    tree = SourceTree(root, f"vllm {version}")
    flags = tree.argparse_flags(VLLM_ARG_UTILS, "AsyncEngineArgs.add_cli_args")
    engine_fields = tree.class_fields(VLLM_ARG_UTILS, "EngineArgs")
    typed: dict[str, Flag] = {}
    # The frontend's flags are its dataclass fields, kebab-cased (cli_args.py
    # ``frontend_group.add_argument(f"--{key.replace('_', '-')}", ...)``).
    for module in VLLM_FRONTEND:
        if tree.has_module(module):
            for field_name, field_type in tree.class_fields(module, "FrontendArgs").items():
                option = "--" + field_name.replace("_", "-")
                takes_value, kind = _vllm_flag_type(ast.unparse(field_type))
                typed[option] = Flag((option,), takes_value, kind)
                if kind == "bool":
                    typed[f"--no-{option[2:]}"] = typed[option]
    for name, flag in flags.items():
        snake = flag.names[0].lstrip("-").replace("-", "_")
        annotation = engine_fields.get(snake)
        if annotation is None or flag.choices is not None:
            typed[name] = flag
            continue
        takes_value, kind = _vllm_flag_type(ast.unparse(annotation))
        typed[name] = Flag(flag.names, takes_value, kind, flag.choices, flag.choices_unresolved)
        if kind == "bool":
            typed[f"--no-{flag.names[0].lstrip('-')}"] = typed[name]
    connectors = {
        s
        for c in calls_named(tree.parse(VLLM_FACTORY), "register_connector")
        if (s := first_string_arg(c))
    }
    registry: set[str] = set()
    for node in ast.walk(tree.parse(VLLM_EVENTS)):
        target, value = None, None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        if target == "_registry" and isinstance(value, ast.Dict):
            registry |= {str(k.value) for k in value.keys if isinstance(k, ast.Constant)}
    registry |= {
        s
        for c in calls_named(tree.parse(VLLM_EVENTS), "register_publisher")
        if (s := first_string_arg(c))
    }
    env_dict = tree.top_level(VLLM_ENVS, "environment_variables")
    env_types: dict[str, str] = {}
    if isinstance(env_dict, ast.Dict):
        for key, value in zip(env_dict.keys, env_dict.values, strict=True):
            if isinstance(key, ast.Constant):
                source = ast.unparse(value) if value is not None else ""
                kind = next(
                    (t for t in ("int", "float") if re.search(rf"\b{t}\(\s*os\.", source)),
                    "str",
                )
                env_types[str(key.value)] = kind
    envs = set(env_types)
    return VllmSurface(
        version=version,
        flags=typed,
        json_flags={
            "--kv-transfer-config": _json_config(tree, VLLM_KV_TRANSFER, "KVTransferConfig"),
            "--kv-events-config": _json_config(tree, VLLM_KV_EVENTS, "KVEventsConfig"),
        },
        connectors=frozenset(connectors),
        publishers=frozenset(registry),
        envs=frozenset(envs),
        env_types=env_types,
        tree=tree,
    )


# ----------------------------------------------------------------------------- SGLang

SGLANG_SERVER_ARGS = "sglang.srt.server_args"
SGLANG_ARG_FIELDS = "sglang.srt.arg_groups.fields"
SGLANG_LAUNCH = "sglang.launch_server"


@dataclass(frozen=True)
class SglangSurface:
    version: str
    flags: dict[str, Flag]
    tree: SourceTree


def _arg_group_flags(tree: SourceTree) -> dict[str, Flag]:
    """Flags SGLang >= 0.5.2x derives from ``A[T, "help" | Arg(...)]`` fields of the
    ``_NS_PATH`` classes under
    sglang/srt/arg_groups/fields/ (``add_cli_args_from_dataclass``, arg_groups/arg_utils.py):
    ``--`` + the field name in kebab case (or ``Arg(cli_name=...)``) plus ``aliases``;
    bool -> store_true; ``choices`` or a ``Literal`` type -> argparse choices."""
    flags: dict[str, Flag] = {}
    for module in tree.modules_under(SGLANG_ARG_FIELDS):
        for cls in tree.parse(module).body:
            # ServerArgs collects the input fields of the classes carrying _NS_PATH
            # (arg_groups/fields/__init__.py).
            if not isinstance(cls, ast.ClassDef) or "_NS_PATH" not in {
                t.id
                for n in cls.body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }:
                continue
            for node in cls.body:
                if not (
                    isinstance(node, ast.AnnAssign)
                    and isinstance(node.target, ast.Name)
                    and isinstance(node.annotation, ast.Subscript)
                    and ast.unparse(node.annotation.value) == "A"
                    and isinstance(node.annotation.slice, ast.Tuple)
                    and len(node.annotation.slice.elts) >= 2
                ):
                    continue
                type_node, meta = node.annotation.slice.elts[:2]
                kw: dict[str, ast.expr] = {}
                if isinstance(meta, ast.Call):
                    kw = {k.arg: k.value for k in meta.keywords if k.arg}
                if tree.literal(module, kw.get("no_cli")) is True:
                    continue
                cli_name = tree.literal(module, kw.get("cli_name"))
                name = (
                    cli_name
                    if isinstance(cli_name, str)
                    else "--" + node.target.id.replace("_", "-")
                )
                aliases = tree.literal(module, kw.get("aliases"))
                names = (name, *(aliases if isinstance(aliases, list) else []))
                type_text = ast.unparse(type_node)
                choices_value = tree.literal(module, kw["choices"]) if "choices" in kw else None
                literal = tree.literal_choices(module, type_node)
                choices: tuple[str, ...] | None = None
                unresolved = False
                if isinstance(choices_value, list):
                    choices = tuple(str(v) for v in choices_value)
                elif choices_value is UNRESOLVED:
                    unresolved = True
                elif literal:
                    choices = tuple(sorted(literal))
                has_action = "action" in kw
                is_bool = type_text in ("bool", "Optional[bool]") and not has_action
                if "type_parser" in kw:
                    kind = ast.unparse(kw["type_parser"]).rsplit(".", 1)[-1]
                elif is_bool:
                    kind = "bool"
                else:
                    kind = next(
                        (t for t in ("int", "float") if re.search(rf"\b{t}\b", type_text)), "str"
                    )
                flag = Flag(tuple(names), not is_bool, kind, choices, unresolved)
                for n in names:
                    flags[n] = flag
    return flags


def read_sglang(root: Path, version: str) -> SglangSurface:
    tree = SourceTree(root, f"sglang {version}")
    flags = tree.argparse_flags(SGLANG_SERVER_ARGS, "ServerArgs.add_cli_args")
    flags |= _arg_group_flags(tree)
    return SglangSurface(version=version, flags=flags, tree=tree)


# ---------------------------------------------------------------------------- LMCache

LMCACHE_CONFIG = "lmcache.v1.config"
LMCACHE_CONNECTORS = "lmcache.v1.storage_backend.connector"
LMCACHE_MOONCAKE = "lmcache.v1.storage_backend.connector.mooncakestore_connector"
LMCACHE_MP_SERVER = "lmcache.v1.multiprocess.server"
LMCACHE_L2_ADAPTERS = "lmcache.v1.distributed.l2_adapters"


@dataclass(frozen=True)
class ConfigKey:
    """One ``_CONFIG_DEFINITIONS`` entry: its ``env_converter`` as a name ("int",
    "float", "str", "_to_bool", "json" for the ``json.loads`` lambda, ...)."""

    name: str
    converter: str
    type: str


@dataclass(frozen=True)
class UrlScheme:
    """A remote URL scheme and whether its adapter's ``create_connector`` reads the URL."""

    scheme: str
    module: str
    reads_url: bool


@dataclass(frozen=True)
class L2Type:
    """An ``--l2-adapter`` JSON ``type``: the keys its config's ``from_dict`` reads and
    the annotation of each in the config's ``__init__``; ``env``: for each environment
    variable the adapter's module reads (``os.environ.get``/``os.getenv``/
    ``os.environ[...]``), the attribute of the config it stands in for when that
    attribute is empty (``config.<attr> or os.environ.get(NAME, ...)``; "" when the read
    is not such a fallback)."""

    name: str
    keys: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)


def _environment_reads(module: ast.Module) -> dict[str, str]:
    """NAME -> config attribute for each ``os.environ``/``os.getenv`` read in
    ``module``, the attribute being X in ``<obj>.X or <the read>`` ("" otherwise)."""
    fallbacks: dict[int, str] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2:
            first, second = node.values
            if isinstance(first, ast.Attribute):
                fallbacks[id(second)] = first.attr
    out: dict[str, str] = {}
    for node in ast.walk(module):
        name = None
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                name = first_string_arg(node)
        elif (
            isinstance(node, ast.Subscript)
            and ast.unparse(node.value) in ("os.environ", "environ")
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            name = node.slice.value
        if name:
            out[name] = fallbacks.get(id(node), out.get(name, ""))
    return out


@dataclass(frozen=True)
class LmcacheSurface:
    version: str
    config: dict[str, ConfigKey]
    aliases: dict[str, str]
    ec_env_prefix: str | None
    schemes: dict[str, UrlScheme]
    # Keys of extra_config the Mooncake connector forwards to the store's setup(), and
    # the prefix any other forwarded key carries.
    mooncake_keys: frozenset[str]
    mooncake_prefix: str
    mooncake_reads_extra_config: bool
    mp_server_flags: dict[str, Flag]
    l2_types: dict[str, L2Type]
    native_extensions: tuple[str, ...]
    tree: SourceTree

    def env_names(self) -> dict[str, str]:
        """``LMCACHE_<KEY>`` -> config key (aliases included)."""
        out = {f"LMCACHE_{k.upper()}": k for k in self.config}
        out |= {f"LMCACHE_{a.upper()}": k for a, k in self.aliases.items()}
        return out


def _converter(node: ast.AST | None) -> str:
    if node is None:
        return "missing"
    if isinstance(node, ast.Lambda):
        return "json" if "json.loads" in ast.unparse(node) else "lambda"
    return ast.unparse(node).rsplit(".", 1)[-1]


def _lmcache_config(tree: SourceTree) -> dict[str, ConfigKey]:
    definitions = tree.top_level(LMCACHE_CONFIG, "_CONFIG_DEFINITIONS")
    out: dict[str, ConfigKey] = {}
    if not isinstance(definitions, ast.Dict):
        return out
    for key, value in zip(definitions.keys, definitions.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(value, ast.Dict)):
            continue
        entry = {
            k.value: v
            for k, v in zip(value.keys, value.values, strict=True)
            if isinstance(k, ast.Constant)
        }
        out[str(key.value)] = ConfigKey(
            name=str(key.value),
            converter=_converter(entry.get("env_converter")),
            type=ast.unparse(entry["type"]) if "type" in entry else "",
        )
    return out


def _url_schemes(tree: SourceTree) -> dict[str, UrlScheme]:
    out = {}
    for module in tree.modules_under(LMCACHE_CONNECTORS):
        if not module.endswith("_adapter"):
            continue
        for cls in tree.parse(module).body:
            if not isinstance(cls, ast.ClassDef):
                continue
            init = next(
                (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None,
            )
            create = next(
                (
                    n
                    for n in cls.body
                    if isinstance(n, ast.FunctionDef) and n.name == "create_connector"
                ),
                None,
            )
            if init is None or create is None:
                continue
            for call in calls_named(init, "__init__"):
                scheme = first_string_arg(call)
                if scheme and scheme.endswith("://"):
                    out[scheme[:-3]] = UrlScheme(
                        scheme[:-3], module, reads_url=".url" in ast.unparse(create)
                    )
    return out


def _l2_types(tree: SourceTree) -> dict[str, L2Type]:
    out = {}
    for module in tree.modules_under(LMCACHE_L2_ADAPTERS):
        for call in calls_named(tree.parse(module), "register_l2_adapter_type"):
            name = first_string_arg(call)
            if not name or len(call.args) < 2 or not isinstance(call.args[1], ast.Name):
                continue
            cls = call.args[1].id
            from_dict = tree.method(module, cls, "from_dict")
            init = tree.method(module, cls, "__init__")
            keys: dict[str, str] = {}
            params = (
                {a.arg: ast.unparse(a.annotation) for a in init.args.args if a.annotation}
                if init
                else {}
            )
            for node in ast.walk(from_dict) if from_dict else []:
                key = None
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get"
                ):
                    key = first_string_arg(node)
                elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                    key = node.slice.value if isinstance(node.slice.value, str) else None
                if key:
                    keys[key] = params.get(key, "")
            out[name] = L2Type(name, keys, _environment_reads(tree.parse(module)))
    return out


def _set_constant(tree: SourceTree, module: str, name: str) -> frozenset[str]:
    value = tree.literal(module, tree.top_level(module, name))
    return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()


def read_lmcache(root: Path, version: str, manifest: list[str]) -> LmcacheSurface:
    tree = SourceTree(root, f"lmcache {version}")
    aliases = tree.literal(LMCACHE_CONFIG, tree.top_level(LMCACHE_CONFIG, "_CONFIG_ALIASES"))
    prefix = tree.literal(LMCACHE_CONFIG, tree.top_level(LMCACHE_CONFIG, "_EC_ENV_PREFIX"))
    mooncake_prefix = tree.literal(
        LMCACHE_MOONCAKE, tree.top_level(LMCACHE_MOONCAKE, "_MOONCAKE_PREFIX")
    )
    loader = tree.method(LMCACHE_MOONCAKE, "MooncakeStoreConfig", "load_from_lmcache_config")
    return LmcacheSurface(
        version=version,
        config=_lmcache_config(tree),
        aliases=aliases if isinstance(aliases, dict) else {},
        ec_env_prefix=prefix if isinstance(prefix, str) else None,
        schemes=_url_schemes(tree),
        mooncake_keys=_set_constant(tree, LMCACHE_MOONCAKE, "_LEGACY_PASSTHROUGH_KEYS"),
        mooncake_prefix=mooncake_prefix if isinstance(mooncake_prefix, str) else "",
        mooncake_reads_extra_config=loader is not None and "extra_config" in ast.unparse(loader),
        mp_server_flags=tree.argparse_flags(LMCACHE_MP_SERVER)
        if tree.has_module(LMCACHE_MP_SERVER)
        else {},
        l2_types=_l2_types(tree),
        native_extensions=tuple(n for n in manifest if re.fullmatch(r"lmcache/[^/]+\.so", n)),
        tree=tree,
    )
