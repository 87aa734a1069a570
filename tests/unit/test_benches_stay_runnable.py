"""The benches drive the module's own code (bench/detect_latency.py's FakeModule through ModelWaiter): a change to
what the run asks of its module (AnsibleModule's warn, run_command, ...) must not leave them broken unnoticed."""
import importlib.util
import os

from ansible.module_utils import sglang_host_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench(name):
    spec = importlib.util.spec_from_file_location("bench_" + name, os.path.join(REPO, "bench", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_latency_bench_s_module_is_enough_for_the_run():
    bench = _bench("detect_latency")
    module = bench.FakeModule(name="bench", log_dir="/nonexistent", health_url="http://127.0.0.1:1/health_generate",
                              argv=["true"])
    host = sglang_host_port.make_host(module)  # raises on anything the run asks of its module that the bench lacks
    host.say("a warning")
    assert module.warnings == ["a warning"]
    assert callable(bench.install_supervisor)  # the supervisor installed where the run looks (program_dir)
