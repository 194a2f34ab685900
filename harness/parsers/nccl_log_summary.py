"""What the distinct payloads of an NCCL debug log add up to, once all are read
(harness.parsers.nccl_log_payloads.PayloadFacts holds what each said): the network NCCL used and
why that is known, the plugin and provider, GDR, the errors in catalogue order: the
NcclLogSummary harness.parsers.nccl_log returns."""

from __future__ import annotations

from harness.parsers.nccl_failures import FAILURES
from harness.parsers.nccl_log_facts import FailureHit, NcclLogSummary
from harness.parsers.nccl_log_payloads import PayloadFacts

__all__ = ["summarize"]


def _network(facts: PayloadFacts) -> str | None:
    if facts.net_channels:
        return facts.net_channels.most_common(1)[0][0]
    if "Socket" in facts.networks:  # some rank fell back: the job runs at socket speed
        return "Socket"
    if facts.networks:
        return facts.networks[0]
    # No `Using network` (NCCL < 2.6, or a log cut short): NCCL initialises its own IB and
    # Socket transports only when no plugin came before them, so their device lines name the
    # network when no plugin was seen or the plugin failed.
    if facts.ofi_seen and not facts.plugin_failed:
        return None
    if facts.ib_nics:
        return "IB"
    if facts.fastsocket_nics:
        return "FastSocket"
    if facts.socket_nics:
        return "Socket"
    if facts.ib_warned is not None:
        return "IB"
    return None


def _retry_warning(facts: PayloadFacts) -> tuple[str, ...]:
    tries, of, text = facts.retries
    return (f"{text} ({tries}/{of}): a peer was not listening (the latest try seen)",) if tries else ()


def _socket_only(facts: PayloadFacts, network: str | None) -> bool:
    """No external plugin and no IB device: NCCL's socket transport is the only one left
    (NCCL < 2.6 prints no `Using network` line)."""
    return (network == "Socket" and facts.no_plugin and facts.ib_absent and not facts.ib_nics
            and not facts.ofi_seen and facts.plugin_loaded is None)


def _network_evidence(facts: PayloadFacts, network: str | None) -> str | None:
    """Why `network` is known when no `Using network` / channel line said it."""
    if network is None or facts.net_channels or network in facts.networks:
        return None
    if _socket_only(facts, network):
        return ("no NET plugin (`NET/Plugin : No plugin found`) and no IB device "
                "(`NET/IB : No device found`): the socket transport is the only one left")
    if network == "IB" and not facts.ib_nics and facts.ib_warned:
        return f"NET/IB WARN: {facts.ib_warned} (only NCCL's IB transport prints NET/IB)"
    return f"the NET/{network} device line (`NET/{network} : Using ...`)"


def _errors(facts: PayloadFacts) -> tuple[FailureHit, ...]:
    """The errors in catalogue order; a `last_resort` entry's only where nothing else
    explains a line and no watchdog timeout was read (they are the consequence of the
    failure the others name)."""
    hits = sorted(facts.errors.items(), key=lambda kv: kv[0][0])
    named = [hit for (index, _), hit in hits if not FAILURES[index].last_resort]
    return tuple(named or ([] if facts.timeouts else (hit for _, hit in hits)))


def summarize(facts: PayloadFacts) -> NcclLogSummary:
    """What the payloads read add up to (after the last chunk: a record still waiting for its
    next line is read as it is)."""
    facts.wrapped_tail(None)
    network = _network(facts)
    libfabric_net = network is not None and ("ibfabric" in network or "OFI" in network)
    plugin = None
    if facts.ofi_seen or (facts.plugin_loaded and "ibfabric" in facts.plugin_loaded):
        plugin = "aws-ofi-nccl"
    elif facts.plugin_loaded:
        plugin = facts.plugin_loaded
    provider = fabric = nics = None
    if network is None and facts.ofi_seen and not facts.plugin_failed:
        # No `Using network` line (a trimmed paste): the plugin's own selection is what it
        # offers NCCL; the network stays unknown.
        provider, fabric, nics = facts.provider, facts.fabric, facts.ofi_nics
    elif network is None:
        provider = facts.provider
    elif libfabric_net:
        provider, fabric, nics = facts.provider, facts.fabric, facts.ofi_nics
    elif network.lower() == "socket":
        provider, nics = "socket", facts.socket_nics
    elif network == "FastSocket":
        provider, nics = "fastsocket", facts.fastsocket_nics
    elif network.upper().startswith("IB"):
        provider, nics = "ib", facts.ib_nics
    else:
        provider = network.lower()
    return NcclLogSummary(
        nccl_version=facts.versions[0] if facts.versions else None,
        plugin=plugin,
        plugin_version=facts.ofi_version if plugin == "aws-ofi-nccl" else None,
        plugin_failed=facts.plugin_failed,
        network=network,
        networks_seen=tuple(facts.networks),
        provider=provider,
        fabric=fabric,
        num_nics=nics,
        protocol=facts.protocol if libfabric_net or (network is None and facts.ofi_seen)
        else None,
        platform=facts.platform,
        libfabric_version=facts.libfabric,
        gdr_negative=facts.nogdr or network in facts.gdr_disabled_nets,
        socket_only=_socket_only(facts, network),
        plugin_dlerror=facts.plugin_dlerror,
        gdr_gpus=tuple(sorted({g for g, _ in facts.gdr_pairs})),
        gdr_gpus_enabled=tuple(sorted({g for (g, _), on in facts.gdr_pairs.items() if on})),
        num_net_channels=sum(facts.net_channels.values()),
        num_gdr_channels=facts.gdr_channels,
        num_collnet_channels=facts.collnet_channels,
        num_collnet_gdr_channels=facts.collnet_gdr_channels,
        net_channels_by_network=dict(facts.net_channels),
        nranks=facts.nranks,
        env_added=dict(facts.env_added),
        env_skipped=tuple(facts.env_skipped),
        warnings=tuple(facts.warnings) + _retry_warning(facts),
        network_evidence=_network_evidence(facts, network),
        # Most specific cause first (catalogue order), then in the order seen.
        errors=_errors(facts),
        timeouts=tuple(facts.timeouts.values()),
    )
