"""The engine contract: a wired pod checked against one set of engine releases.

Pure functions, one per rule; each returns the failure messages (empty: accepted). A
message names the injected item, the release and why, e.g. ``sglang 0.5.3: engine
flag --lmcache-config-file is not a flag of sglang.launch_server``. Variables that
no reader of the container reads are not failures: ``check_pod`` returns them apart
(``Unread``) for the report (tests/engine_contracts/unread.py).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from shared import constants as c
from shared.runtime_adapters.engine import select_sglang_engine, select_vllm_engine
from shared.runtime_adapters.sglang_lmcache import CONFIG_CONTENT_ENV, CONFIG_FILE_ENV
from tests.engine_contracts.source import Flag
from tests.engine_contracts.surfaces import LmcacheSurface, SglangSurface, VllmSurface

# Variables the interpreter or the container runtime reads, not the engine.
INTERPRETER_ENV = frozenset({"PYTHONHASHSEED"})
CONTAINER_RUNTIME_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES"})
# The placeholder an env var sourced from the downward API expands to.
DOWNWARD_API_VALUE = "10.0.0.7"
# The Mooncake store setup key that carries the master's address (LMCache forwards it to
# MooncakeDistributedStore.setup() from extra_config, mooncakestore_connector.py).
MOONCAKE_MASTER_KEY = "master_server_address"
VLLM_CLI = "vllm serve"
# A Python annotation -> the JSON / YAML value types that satisfy it.
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "float": (int, float),
    "bool": bool,
}
SGLANG_CLI = "sglang.launch_server"


@dataclass(frozen=True)
class Releases:
    """One pinned set: the surfaces of its vLLM, SGLang and LMCache releases."""

    name: str
    vllm: VllmSurface
    sglang: SglangSurface
    lmcache: LmcacheSurface


@dataclass(frozen=True)
class Unread:
    """An injected variable none of its container's readers reads."""

    variable: str
    container: str
    readers: str


@dataclass
class PodReport:
    failures: list[str] = field(default_factory=list)
    unread: list[Unread] = field(default_factory=list)
    # Items looked at (flags, variables, JSON keys, sidecar commands ...).
    items: int = 0


# ------------------------------------------------------------------ Kubernetes pieces


def expand(value: str, defined: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a variable defined earlier in the container's
    env is substituted, ``$$`` escapes, anything else stays as written."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return defined.get(name, match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


def container_env(container: dict[str, Any]) -> dict[str, str | None]:
    """name -> value as the container sees it (``$(VAR)`` expanded; a downward-API or
    secret/configMap-sourced variable gets a placeholder, None when not literal)."""
    out: dict[str, str | None] = {}
    defined: dict[str, str] = {}
    for var in container.get("env") or []:
        name = str(var.get("name"))
        if "value" in var:
            value = expand(str(var["value"]), defined)
            defined[name] = value
            out[name] = value
        elif "fieldRef" in (var.get("valueFrom") or {}):
            defined[name] = DOWNWARD_API_VALUE
            out[name] = DOWNWARD_API_VALUE
        else:
            out[name] = None
    return out


def unexpanded_references(container: dict[str, Any]) -> dict[str, list[str]]:
    """variable -> the ``$(VAR)`` references in its value that Kubernetes leaves as
    written because VAR is not defined earlier in the container's env."""
    out: dict[str, list[str]] = {}
    defined: set[str] = set()
    for var in container.get("env") or []:
        name = str(var.get("name"))
        if "value" in var:
            refs = re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", str(var["value"]))
            missing = [r for r in refs if r not in defined]
            if missing:
                out[name] = missing
        defined.add(name)
    return out


def argv(container: dict[str, Any]) -> list[str]:
    env = {k: v for k, v in container_env(container).items() if v is not None}
    return [
        expand(str(t), env)
        for t in [*(container.get("command") or []), *(container.get("args") or [])]
    ]


@dataclass(frozen=True)
class Option:
    flag: str
    value: str | None


def options(tokens: list[str], flags: dict[str, Flag]) -> list[Option]:
    """The ``--flag [value]`` / ``--flag=value`` options among ``tokens``, as argparse
    splits them (a known boolean flag takes no value)."""
    out = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            continue
        if "=" in token:
            name, _, value = token.partition("=")
            out.append(Option(name, value))
            continue
        spec = flags.get(token)
        if spec is not None and not spec.takes_value:
            out.append(Option(token, None))
        elif i < len(tokens) and not tokens[i].startswith("--"):
            out.append(Option(token, tokens[i]))
            i += 1
        else:
            out.append(Option(token, None))
    return out


def injected(before: list[Option], after: list[Option]) -> list[Option]:
    """Options of ``after`` that ``before`` did not carry (same flag and value)."""
    remaining = list(before)
    out = []
    for option in after:
        if option in remaining:
            remaining.remove(option)
        else:
            out.append(option)
    return out


# ------------------------------------------------------------------------- the rules


def converts(kind: str | None, value: str) -> str | None:
    """Why argparse's ``type`` would refuse ``value``; None when it converts."""
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "json" and not isinstance(json.loads(value), dict):
            return "is not a JSON object"
    except ValueError:
        return f"does not convert to {kind}"
    return None


def check_flag(release: str, cli: str, flags: dict[str, Flag], option: Option) -> list[str]:
    """Every injected flag exists, and its value is in its choices or converts."""
    what = f"{release}: flag {option.flag}"
    spec = flags.get(option.flag)
    if spec is None:
        return [f"{what} is not a flag of {cli}"]
    if not spec.takes_value:
        if option.value is not None:
            return [f"{what} is a boolean flag and takes no value, got {option.value!r}"]
        return []
    if option.value is None:
        return [f"{what} needs a value"]
    if spec.choices is not None and option.value not in spec.choices:
        return [f"{what} value {option.value!r} is not one of its choices {list(spec.choices)}"]
    problem = converts(spec.type, option.value)
    return [f"{what} value {option.value!r} {problem}"] if problem else []


def check_vllm_json_flag(surface: VllmSurface, option: Option) -> list[str]:
    """Every key of a JSON-valued vLLM flag is a field of its config class; the
    connector and the publisher it names are registered; Literal fields hold an allowed
    value."""
    config = surface.json_flags.get(option.flag)
    release = f"vllm {surface.version}"
    if config is None or option.value is None:
        return []
    try:
        body = json.loads(option.value)
    except ValueError:
        return [f"{release}: {option.flag} is not JSON: {option.value!r}"]
    if not isinstance(body, dict):
        return [f"{release}: {option.flag} is not a JSON object: {option.value!r}"]
    out = []
    for key, value in body.items():
        if key not in config.fields:
            out.append(f"{release}: {option.flag} key {key!r} is not a field of {config.name}")
        elif key in config.choices and str(value) not in config.choices[key]:
            out.append(
                f"{release}: {option.flag} {key}={value!r} is not one of "
                f"{sorted(config.choices[key])}"
            )
    connector = body.get("kv_connector")
    if connector is not None and connector not in surface.connectors:
        out.append(f"{release}: {option.flag} kv_connector {connector!r} is not registered")
    publisher = body.get("publisher")
    if option.flag == "--kv-events-config" and publisher not in (None, *surface.publishers):
        out.append(f"{release}: {option.flag} publisher {publisher!r} is not registered")
    return out


def check_lmcache_value(surface: LmcacheSurface, variable: str, key: str, value: str) -> list[str]:
    """An ``LMCACHE_<KEY>`` value converts the way LMCache's ``env_converter`` does."""
    converter = surface.config[key].converter
    release = f"lmcache {surface.version}"
    what = f"{release}: {variable}={value!r} ({key}, {converter})"
    if converter in ("int", "float"):
        problem = converts(converter, value)
        return [f"{what} {problem}"] if problem else []
    if converter == "_to_bool":
        # _to_bool (config_base.py): "true"/"1" is True, ANY other text is False.
        if value.strip().lower() not in ("true", "1", "false", "0"):
            return [f"{what} is neither true/1 nor false/0: _to_bool reads it as False"]
        return []
    if converter == "json":
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            return [f"{what} is not JSON: {exc}"]
        if not isinstance(parsed, dict):
            return [f"{what} is not a JSON object"]
        return []
    if converter == "str":
        return []
    return [f"{what}: the checker does not model converter {converter}"]


def check_vllm_env_value(surface: VllmSurface, variable: str, value: str) -> list[str]:
    """A ``VLLM_*`` value converts the way vllm/envs.py converts it (``int(os.getenv(...))``)."""
    kind = surface.env_types[variable]
    problem = converts(kind, value)
    return (
        [f"vllm {surface.version}: {variable}={value!r} {problem} (vllm/envs.py)"]
        if problem
        else []
    )


def check_hash_seed(value: str) -> list[str]:
    """CPython accepts ``random`` or an integer in [0, 4294967295]; else it refuses to start."""
    if value == "random" or (value.isdigit() and int(value) <= 4294967295):
        return []
    return [f"python: PYTHONHASHSEED={value!r} is neither 'random' nor an integer in [0, 2**32-1]"]


def lmcache_key_of(surface: LmcacheSurface, variable: str) -> str | None:
    return surface.env_names().get(variable)


def check_remote_url(
    surface: LmcacheSurface, env: dict[str, str | None], endpoint: str | None
) -> list[str]:
    """Every remote URL scheme has a connector, and the binding's address reaches it:
    from the URL for a connector that reads it (``lm://``), from ``extra_config``'s
    ``master_server_address`` for ``mooncakestore://`` (its adapter never reads the URL)."""
    url = env.get("LMCACHE_REMOTE_URL")
    release = f"lmcache {surface.version}"
    if not url:
        return []
    scheme = url.split("://", 1)[0] if "://" in url else ""
    adapter = surface.schemes.get(scheme)
    if adapter is None:
        return [f"{release}: LMCACHE_REMOTE_URL scheme {scheme!r} has no connector adapter"]
    if endpoint is None:
        return []
    if adapter.reads_url:
        netloc = urlsplit(url).netloc
        if netloc != endpoint:
            return [
                f"{release}: LMCACHE_REMOTE_URL {url!r} carries {netloc!r}, not the "
                f"binding's endpoint {endpoint!r}"
            ]
        return []
    if scheme == "mooncakestore":
        return check_mooncake_address(surface, env, endpoint)
    return [
        f"{release}: the {scheme}:// adapter ({adapter.module}) does not read the URL and "
        "the checker knows no other place the address reaches it from"
    ]


def check_mooncake_address(
    surface: LmcacheSurface, env: dict[str, str | None], endpoint: str
) -> list[str]:
    """mooncakestore_adapter.create_connector never reads the URL: the connector's
    MooncakeStoreConfig.load_from_lmcache_config reads extra_config, so the master's
    address must be there (``master_server_address``), and every key must be one the
    connector forwards to the store's setup() or reads itself."""
    release = f"lmcache {surface.version}"
    raw = env.get("LMCACHE_EXTRA_CONFIG")
    if not surface.mooncake_reads_extra_config:
        return [
            f"{release}: MooncakeStoreConfig.load_from_lmcache_config no longer reads extra_config"
        ]
    if raw is None:
        return [
            f"{release}: mooncakestore:// connects nowhere: the adapter ignores "
            f"LMCACHE_REMOTE_URL and no LMCACHE_EXTRA_CONFIG carries {MOONCAKE_MASTER_KEY} "
            f"(load_from_lmcache_config raises 'The extra config is not set.')"
        ]
    try:
        extra = json.loads(raw)
    except ValueError:
        return [f"{release}: LMCACHE_EXTRA_CONFIG is not JSON: {raw!r}"]
    if not isinstance(extra, dict):
        return [f"{release}: LMCACHE_EXTRA_CONFIG is not a JSON object: {raw!r}"]
    out = []
    prefix = surface.mooncake_prefix
    address = extra.get(prefix + MOONCAKE_MASTER_KEY, extra.get(MOONCAKE_MASTER_KEY))
    if MOONCAKE_MASTER_KEY not in surface.mooncake_keys and not prefix:
        out.append(f"{release}: the Mooncake connector forwards no {MOONCAKE_MASTER_KEY}")
    if address != endpoint:
        out.append(
            f"{release}: LMCACHE_EXTRA_CONFIG {MOONCAKE_MASTER_KEY}={address!r}, not the "
            f"master's endpoint {endpoint!r}"
        )
    for key in extra:
        if key not in surface.mooncake_keys and not (prefix and key.startswith(prefix)):
            out.append(
                f"{release}: LMCACHE_EXTRA_CONFIG key {key!r} is neither forwarded to "
                f"Mooncake ({sorted(surface.mooncake_keys)} or {prefix}*) nor read by LMCache"
            )
    return out


def script_of(container: dict[str, Any]) -> str | None:
    """The ``python3 -c <script>`` source a container runs, if it does."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if (
        len(command) >= 3
        and command[0].rsplit("/", 1)[-1].startswith("python")
        and command[1] == "-c"
    ):
        return str(command[2])
    return None


def exec_argv(container: dict[str, Any]) -> list[str] | None:
    """The argv a ``python3 -c`` bootstrap execs (``os.execv*(sys.executable, [...,
    *sys.argv[1:]])``), with the container's args in place of ``sys.argv[1:]``; for
    ``python3 -m module ...`` the command itself; None otherwise."""
    tokens = argv(container)
    script = script_of(container)
    if script is None:
        if (
            len(tokens) >= 3
            and tokens[0].rsplit("/", 1)[-1].startswith("python")
            and tokens[1] == "-m"
        ):
            return tokens
        return None
    args = tokens[3:]
    for node in ast.walk(ast.parse(script)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("exec")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.List)
        ):
            out: list[str] = []
            for elt in node.args[1].elts:
                if isinstance(elt, ast.Constant):
                    out.append(str(elt.value))
                elif isinstance(elt, ast.Starred) and "sys.argv" in ast.unparse(elt):
                    out.extend(args)
                elif "sys.executable" in ast.unparse(elt):
                    out.append("python3")
            return out
    return None


def check_module_command(releases: Releases, command: list[str]) -> list[str]:
    """A sidecar's ``python -m`` module exists in the release and accepts its flags,
    and an ``--l2-adapter`` JSON names a registered type with keys it reads."""
    module = command[2]
    package = module.split(".", 1)[0]
    surfaces: dict[str, VllmSurface | SglangSurface | LmcacheSurface] = {
        "lmcache": releases.lmcache,
        "vllm": releases.vllm,
        "sglang": releases.sglang,
    }
    surface = surfaces.get(package)
    if surface is None:
        return [f"{releases.name}: python -m {module}: no pinned release ships {package}"]
    release = f"{package} {surface.version}"
    tree = surface.tree
    if not tree.has_module(module):
        return [f"{release}: python -m {module}: the module does not exist"]
    flags = (
        releases.lmcache.mp_server_flags
        if isinstance(surface, LmcacheSurface) and module == "lmcache.v1.multiprocess.server"
        else tree.argparse_flags(module)
    )
    out = []
    for option in options(command[3:], flags):
        out += check_flag(release, f"python -m {module}", flags, option)
        if option.flag == "--l2-adapter" and option.value is not None:
            out += check_l2_adapter(releases.lmcache, option.value)
    return out


def check_l2_adapter(surface: LmcacheSurface, value: str) -> list[str]:
    release = f"lmcache {surface.version}"
    try:
        body = json.loads(value)
    except ValueError:
        return [f"{release}: --l2-adapter is not JSON: {value!r}"]
    if not isinstance(body, dict) or "type" not in body:
        return [f"{release}: --l2-adapter is not a JSON object with a type: {value!r}"]
    kind = body["type"]
    registered = surface.l2_types.get(str(kind))
    if registered is None:
        return [f"{release}: --l2-adapter type {kind!r} is not registered"]
    out = []
    for key, item in body.items():
        if key == "type":
            continue
        if key not in registered.keys:
            out.append(f"{release}: --l2-adapter {kind} key {key!r} is not read by its from_dict")
            continue
        want = registered.keys[key]
        python_type = JSON_TYPES.get(want)
        if python_type is not None and (
            not isinstance(item, python_type) or (want == "int" and isinstance(item, bool))
        ):
            out.append(f"{release}: --l2-adapter {kind} {key}={item!r} is not a JSON {want}")
    return out


# The resp L2 adapter's credentials: the config attribute each variable stands in for.
L2_CREDENTIAL_ENV: Final = {
    "LMCACHE_RESP_PASSWORD": "password",
    "LMCACHE_RESP_USERNAME": "username",
}


def check_l2_credentials(surface: LmcacheSurface, container: dict[str, Any]) -> list[str]:
    """Decision "No secret on a command line": credentials reach the MP worker only
    through the environment. Each credential variable the container sets must be read
    by the release's adapter for its ``--l2-adapter`` type, as the fallback of the very
    config attribute it stands for (so the JSON must not carry that key: a value there,
    even a $(VAR), would win and sit on the command line)."""
    release = f"lmcache {surface.version}"
    tokens = exec_argv(container) or []
    values = [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--l2-adapter"]
    env = {str(e.get("name")) for e in container.get("env") or []}
    out: list[str] = []
    for value in values:
        body = json.loads(value)
        registered = surface.l2_types.get(str(body.get("type")))
        if registered is None:
            continue  # check_l2_adapter reports it
        for variable, attribute in L2_CREDENTIAL_ENV.items():
            if attribute in body:
                out.append(
                    f"{release}: --l2-adapter carries {attribute!r}: credentials go through "
                    f"{variable}, never the command line"
                )
            if variable in env and registered.env.get(variable) != attribute:
                out.append(
                    f"{release}: the {registered.name} L2 adapter does not read {variable} "
                    f"as its {attribute} (it reads {sorted(registered.env)})"
                )
    return out


def check_mp_config_file(
    releases: Releases, engine: dict[str, Any], worker: dict[str, Any]
) -> list[str]:
    """The SGLang engine's ``--lmcache-config-file`` is the file the MP worker writes,
    every key of it is an LMCache config key whose value has the key's type, and it
    carries the ``mp_host``/``mp_port`` the engine's LMCache MP connector dials, equal
    to the worker's ``--host``/``--port``."""
    release = f"lmcache {releases.lmcache.version}"
    env = container_env(worker)
    engine_flags = {o.flag: o.value for o in options(argv(engine), releases.sglang.flags)}
    path, content = env.get(CONFIG_FILE_ENV), env.get(CONFIG_CONTENT_ENV)
    if engine_flags.get("--lmcache-config-file") != path:
        return [
            f"{releases.name}: the engine reads --lmcache-config-file "
            f"{engine_flags.get('--lmcache-config-file')!r} but the MP worker writes {path!r}"
        ]
    try:
        config = yaml.safe_load(content or "")
    except yaml.YAMLError as exc:
        return [f"{release}: the MP config file is not YAML: {exc}"]
    if not isinstance(config, dict):
        return [f"{release}: the MP config file is not a mapping: {content!r}"]
    out = []
    for key, value in config.items():
        spec = releases.lmcache.config.get(str(key))
        if spec is None:
            out.append(f"{release}: MP config file key {key!r} is not an LMCache config key")
            continue
        base = spec.type.replace("Optional[", "").rstrip("]")
        want = JSON_TYPES.get(base)
        if want is not None and not isinstance(value, want):
            out.append(f"{release}: MP config file {key}={value!r} is not a {base}")
    worker_cmd = exec_argv(worker) or []
    worker_opts = {
        o.flag: o.value for o in options(worker_cmd[3:], releases.lmcache.mp_server_flags)
    }
    for key, flag in (("mp_host", "--host"), ("mp_port", "--port")):
        if key not in config:
            out.append(f"{release}: MP config file lacks {key}, which the engine's connector dials")
        elif str(config[key]) != worker_opts.get(flag):
            out.append(
                f"{release}: MP config file {key}={config[key]!r} but the worker listens on "
                f"{flag} {worker_opts.get(flag)!r}"
            )
    return out


def check_native_extension(surface: LmcacheSurface, container: dict[str, Any]) -> list[str]:
    """The kernel check looks for a native extension the LMCache release ships."""
    script = script_of(container) or ""
    stems = sorted({n.rsplit("/", 1)[-1].split(".", 1)[0] for n in surface.native_extensions})
    named = {
        s for s in stems if f"{s}*.so" in script or f'"{s}"' in script or f"lmcache.{s}" in script
    }
    if named:
        return []
    globs = sorted(set(re.findall(r"[\w]+\*\.so", script)))
    return [
        f"lmcache {surface.version}: the kernel check ({container.get('name')}) looks for "
        f"{globs or 'no extension'} but the release ships "
        f"{[f'lmcache/{s}*.so' for s in stems]}"
    ]


# --------------------------------------------------------------------- env readers


def expansion_references(container: dict[str, Any]) -> set[str]:
    """Variables another variable, the command or the args of the container reference
    as ``$(VAR)``: Kubernetes reads them while expanding (a downward-API source of
    ``local_hostname``, say)."""
    texts = [str(v.get("value", "")) for v in container.get("env") or []]
    texts += [str(t) for t in [*(container.get("command") or []), *(container.get("args") or [])]]
    return {m for t in texts for m in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", t)}


def env_readers(
    releases: Releases,
    runtime: str | None,
    script: str | None,
    referenced: frozenset[str] = frozenset(),
) -> tuple[str, list[tuple[str, Any]]]:
    """(label, readers) of a container's variables: the engine and the LMCache release
    it loads, its own ``-c`` script, Kubernetes' ``$(VAR)`` expansion of the container's
    other variables and argv, the interpreter and the container runtime."""
    lm = releases.lmcache
    readers: list[tuple[str, Any]] = []
    if runtime == c.RUNTIME_VLLM:
        v = releases.vllm
        label = f"vllm {v.version} + lmcache {lm.version}"
        readers.append(
            (
                "vllm",
                lambda n: n in v.envs if n.startswith("VLLM_") else v.tree.mentions_string(n),
            )
        )
    elif runtime == c.RUNTIME_SGLANG:
        s = releases.sglang
        label = f"sglang {s.version} + lmcache {lm.version}"
        readers.append(("sglang", s.tree.mentions_string))
    else:
        label = f"lmcache {lm.version}"
    readers.append(
        (
            "lmcache",
            lambda n: (
                n in lm.env_names()
                or n == "LMCACHE_CONFIG_FILE"
                or bool(lm.ec_env_prefix and n.startswith(lm.ec_env_prefix))
                or lm.tree.mentions_string(n)
            ),
        )
    )
    if script is not None:
        readers.append(("its script", lambda n: f'"{n}"' in script or f"'{n}'" in script))
    readers.append(("kubernetes $(VAR) expansion", referenced.__contains__))
    readers.append(("python", INTERPRETER_ENV.__contains__))
    readers.append(("container runtime", CONTAINER_RUNTIME_ENV.__contains__))
    return label, readers


def check_env(
    releases: Releases,
    container: dict[str, Any],
    names: list[str],
    runtime: str | None,
    report: PodReport,
) -> None:
    """Each injected variable: read by someone (else reported), and an ``LMCACHE_*``
    config variable's value converts as LMCache converts it."""
    env = container_env(container)
    dangling = unexpanded_references(container)
    label, readers = env_readers(
        releases, runtime, script_of(container), frozenset(expansion_references(container))
    )
    for name in names:
        report.items += 1
        for ref in dangling.get(name, []):
            report.failures.append(
                f"{releases.name}: {name} references $({ref}), which is not defined before "
                f"it in container {container.get('name')}: Kubernetes passes it as written"
            )
        if not any(read(name) for _, read in readers):
            report.unread.append(Unread(name, str(container.get("name")), label))
            continue
        key = lmcache_key_of(releases.lmcache, name)
        value = env.get(name)
        if value is None:
            continue
        if key is not None:
            report.failures += check_lmcache_value(releases.lmcache, name, key, value)
        elif runtime == c.RUNTIME_VLLM and name in releases.vllm.env_types:
            report.failures += check_vllm_env_value(releases.vllm, name, value)
        elif name == "PYTHONHASHSEED":
            report.failures += check_hash_seed(value)


# ------------------------------------------------------------------------- the pod


def _named(containers: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {str(x.get("name")): x for x in containers or []}


def _changed_env(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    old = {e.get("name"): e for e in (before or {}).get("env") or []}
    return [str(e["name"]) for e in after.get("env") or [] if old.get(e.get("name")) != e]


def engine_cli(releases: Releases, runtime: str) -> tuple[dict[str, Flag], str, str]:
    """(flags, CLI name, release label) of the runtime's engine in the set."""
    if runtime == c.RUNTIME_VLLM:
        return releases.vllm.flags, VLLM_CLI, f"vllm {releases.vllm.version}"
    return releases.sglang.flags, SGLANG_CLI, f"sglang {releases.sglang.version}"


def check_engine_command(releases: Releases, runtime: str, wired: dict[str, Any]) -> list[str]:
    """Every flag on the wired engine container, the workload's own included: for the
    project's samples and examples, which must start as shipped."""
    select = select_vllm_engine if runtime == c.RUNTIME_VLLM else select_sglang_engine
    engine = wired["spec"]["containers"][select(wired)]
    flags, cli, release = engine_cli(releases, runtime)
    return [f for o in options(argv(engine), flags) for f in check_flag(release, cli, flags, o)]


def check_pod(
    releases: Releases,
    runtime: str,
    original: dict[str, Any],
    wired: dict[str, Any],
    endpoint: str | None,
    own_images: tuple[str, ...] = (),
) -> PodReport:
    """Every item the webhook injected into ``original`` (giving ``wired``), checked
    against ``releases``. ``endpoint``: the binding's address the remote tier must
    reach; ``own_images``: images of inference-cache's own sidecars (not engines)."""
    report = PodReport()
    select = select_vllm_engine if runtime == c.RUNTIME_VLLM else select_sglang_engine
    index = select(wired)
    engine = wired["spec"]["containers"][index]
    engine_before = _named(original["spec"].get("containers")).get(str(engine.get("name")))
    flags, cli, release = engine_cli(releases, runtime)
    after = options(argv(engine), flags)
    new = injected(options(argv(engine_before or {}), flags), after)
    for option in new:
        report.items += 1
        report.failures += check_flag(release, cli, flags, option)
    if runtime == c.RUNTIME_VLLM:
        for option in after:
            if option.flag in releases.vllm.json_flags:
                report.failures += check_vllm_json_flag(releases.vllm, option)
    env_names = _changed_env(engine_before, engine)
    check_env(releases, engine, env_names, runtime, report)
    if runtime == c.RUNTIME_VLLM:
        report.items += 1
        report.failures += check_remote_url(releases.lmcache, container_env(engine), endpoint)

    before_all = _named(
        [*(original["spec"].get("initContainers") or []), *original["spec"]["containers"]]
    )
    for kind in ("initContainers", "containers"):
        for container in wired["spec"].get(kind) or []:
            name = str(container.get("name"))
            if container is engine or name in before_all:
                continue
            if str(container.get("image")) in own_images:
                continue
            report.items += 1
            command = exec_argv(container)
            if command is not None and len(command) >= 3 and command[1] == "-m":
                report.failures += check_module_command(releases, command)
                report.failures += check_l2_credentials(releases.lmcache, container)
                if runtime == c.RUNTIME_SGLANG and CONFIG_CONTENT_ENV in container_env(container):
                    report.items += 1
                    report.failures += check_mp_config_file(releases, engine, container)
            elif script_of(container) is not None:
                report.failures += check_native_extension(releases.lmcache, container)
            else:
                report.failures.append(
                    f"{releases.name}: container {name} runs {argv(container)[:3]}: the checker "
                    "does not know that program"
                )
            check_env(releases, container, _changed_env(None, container), None, report)
    return report
