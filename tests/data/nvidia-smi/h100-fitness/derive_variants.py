#!/usr/bin/env python3
"""Writes the fault variants of the H100 capture (../h100-80gb-hbm3) into this directory, one folder per variant
holding only the files it changes; README.md here says what each edit is and what finding it must give.
tests/unit/test_gpu_fitness.py checks that the folders are what this script writes."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(os.path.dirname(HERE), "h100-80gb-hbm3")
UUID = "GPU-767d6e6e-c74d-df8f-7833-989f8fcf6618"
SECOND_UUID = "GPU-767d6e6e-c74d-df8f-7833-989f8fcf6619"


def captured(name):
    with open(os.path.join(CAPTURE, name)) as handle:
        return handle.read()


def edit(text, old, new, count=1):
    if text.count(old) < count:
        raise SystemExit("derive_variants: %r not in the capture" % old)
    return text.replace(old, new, count)


def two_gpus(xml):
    """A second <gpu> block: the captured one with its UUID, PCI address and power limit and application clock
    changed."""
    start = xml.index("\t<gpu id=")
    end = xml.index("\t</gpu>") + len("\t</gpu>\n")
    second = xml[start:end]
    second = edit(second, UUID, SECOND_UUID)
    second = edit(second, '<gpu id="00000000:00:06.0">', '<gpu id="00000000:00:07.0">')
    second = edit(second, "<current_power_limit>700.00 W", "<current_power_limit>500.00 W")
    second = edit(second, "<applications_clocks>\n\t\t\t<graphics_clock>1980 MHz",
                  "<applications_clocks>\n\t\t\t<graphics_clock>1755 MHz")
    xml = edit(xml, "<attached_gpus>1</attached_gpus>", "<attached_gpus>2</attached_gpus>")
    return xml[:end] + second + xml[end:]


def nvlink(inactive):
    lines = ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)" % UUID]
    lines += ["\t Link %d: %s" % (n, "<inactive>" if n in inactive else "26.562 GB/s") for n in range(18)]
    return "\n".join(lines) + "\n"


XID_LINES = (
    "[ 5012.771830] NVRM: Xid (PCI:0000:00:06): 43, pid=2231, name=python3, Ch 00000008\n"
    "[ 5398.102214] NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)


def variants():
    xml = captured("q.xml")
    return {
        "fabric-in-progress": {
            "q.xml": edit(xml, "<state>N/A</state>", "<state>In Progress</state>"),
            "systemctl-fabricmanager.txt": "active\n"},
        "fabric-manager-failed": {
            "q.xml": edit(edit(xml, "<state>N/A</state>", "<state>Completed</state>"),
                          "<status>N/A</status>", "<status>NVML_ERROR_UNINITIALIZED</status>"),
            "systemctl-fabricmanager.txt": "failed\n"},
        "ecc": {"q.xml": edit(xml, "<dram_uncorrectable>0</dram_uncorrectable>",
                              "<dram_uncorrectable>2</dram_uncorrectable>")},
        "remap-pending": {"q.xml": edit(edit(xml, "<remapped_row_unc>0</remapped_row_unc>",
                                             "<remapped_row_unc>1</remapped_row_unc>"),
                                        "<remapped_row_pending>No", "<remapped_row_pending>Yes")},
        "remap-failed": {"q.xml": edit(xml, "<remapped_row_failure>No", "<remapped_row_failure>Yes")},
        "retired-pages": {"q.xml": edit(xml, "<double_bit_retirement>\n\t\t\t\t<retired_count>N/A",
                                        "<double_bit_retirement>\n\t\t\t\t<retired_count>2")},
        "xid": {"kmsg-nvrm.txt": captured("kmsg-nvrm.txt") + XID_LINES},
        "nvlink-down": {"nvlink-s.txt": nvlink(inactive=(7,))},
        "mig-on": {"q.xml": edit(edit(xml, "<current_mig>Disabled", "<current_mig>Enabled"),
                                 "<pending_mig>Disabled", "<pending_mig>Enabled")},
        "driver-old": {"q.xml": edit(edit(xml, "<driver_version>580.159.04", "<driver_version>550.54.15"),
                                     "<cuda_version>13.0", "<cuda_version>12.4")},
        "persistence-off": {"q.xml": edit(xml, "<persistence_mode>Enabled", "<persistence_mode>Disabled")},
        "two-gpus-mismatched": {"q.xml": two_gpus(xml)},
        "shm-memlock-small": {
            "dev-shm.txt": edit(captured("dev-shm.txt"),
                                "tmpfs          137438953472     0 137438953472   0%",
                                "tmpfs              67108864     0     67108864   0%"),
            "host.txt": edit(captured("host.txt"), "ulimit -l unlimited", "ulimit -l 8192")},
    }


def main(target=HERE):
    for name, files in variants().items():
        os.makedirs(os.path.join(target, name), exist_ok=True)
        for fname, text in files.items():
            with open(os.path.join(target, name, fname), "w") as handle:
                handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
