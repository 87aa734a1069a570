def test_python(host):
    assert host.run("python3 --version").rc == 0
