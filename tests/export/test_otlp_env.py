"""The standard OTEL_* variables configure the OTLP export: endpoint, headers, timeout,
compression, protocol and the resource, the way every OpenTelemetry exporter reads them."""

from __future__ import annotations

import gzip

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from agentledger.adapters.export.otlp import ExportError, export_otlp, settings_from_env
from tests.export.test_otlp import Receiver, demo_log

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_general_variables() -> None:
    settings = settings_from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example:4318/",
            "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dcret , x-team=ml",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ignored",
            "OTEL_SERVICE_NAME": "checkout",
        }
    )
    assert settings.endpoint == "https://otel.example:4318/v1/traces"
    assert settings.headers == {"api-key": "s=cret", "x-team": "ml"}
    assert (settings.timeout, settings.compression, settings.encoding) == (2.5, "gzip", "json")
    assert settings.resource == {"deployment.environment": "prod", "service.name": "checkout"}


def test_traces_variables_win_and_their_endpoint_is_used_as_it_is() -> None:
    settings = settings_from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://general:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:9999/custom/path",
            "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2",
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        }
    )
    assert settings.endpoint == "http://traces:9999/custom/path"
    assert settings.headers == {"b": "2"}
    assert settings.compression == "none"


def test_nothing_set_means_defaults() -> None:
    settings = settings_from_env({})
    assert (settings.endpoint, settings.headers, settings.timeout) == (None, {}, 10.0)
    assert (settings.compression, settings.encoding, settings.resource) == ("none", "protobuf", {})


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTLP/HTTP"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "gzip or none"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "milliseconds"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "-5", "positive"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "name=value"),
    ],
)
def test_a_malformed_variable_is_a_clear_error(name: str, value: str, says: str) -> None:
    with pytest.raises(ExportError, match=says):
        settings_from_env({name: value})


async def test_export_reads_the_environment() -> None:
    receiver = Receiver(httpx.Response(200))
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t,x-one=1",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_SERVICE_NAME": "orders",
    }
    events = await demo_log()
    async with receiver.client() as client:
        result = await export_otlp(events, client=client, environ=environ, headers={"x-one": "given"})
    [request] = receiver.requests
    assert str(request.url) == "http://collector:4318/v1/traces"
    assert request.headers["content-encoding"] == "gzip"
    assert request.headers["authorization"] == "Bearer t"
    assert request.headers["x-one"] == "given"  # a header passed in wins over the variable
    message = trace_service_pb2.ExportTraceServiceRequest.FromString(gzip.decompress(request.content))
    resource = {a.key: a.value.string_value for a in message.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "orders"
    assert result.spans == sum(len(s.spans) for rs in message.resource_spans for s in rs.scope_spans)


async def test_an_export_with_no_endpoint_anywhere_says_so() -> None:
    with pytest.raises(ExportError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        await export_otlp(await demo_log(), environ={})
