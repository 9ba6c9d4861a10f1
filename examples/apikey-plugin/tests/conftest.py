from twistgw.sdk.testing import trial_tests_first


def pytest_collection_modifyitems(items):
    # trial TestCases spin the reactor themselves; run them before the
    # pytest-twisted tests, which keep it running in a greenlet.
    trial_tests_first(items)
