"""drillbook.polling.wait_until: at least one try, the answer itself, the last answer on timeout."""

from drillbook.polling import wait_until


def test_the_first_truthy_answer_is_returned_and_no_more_is_asked():
    answers = iter([None, [], "found", "never asked"])
    asked = []

    def condition():
        asked.append(1)
        return next(answers)

    assert wait_until(condition, timeout_s=30, interval_s=0) == "found"
    assert len(asked) == 3


def test_a_condition_never_met_gives_its_last_falsy_answer():
    calls = []

    def condition():
        calls.append(1)
        return [] if len(calls) > 1 else None

    assert wait_until(condition, timeout_s=0.05, interval_s=0.01) == []
    assert len(calls) >= 2


def test_a_zero_timeout_still_asks_once():
    calls = []
    assert wait_until(lambda: calls.append(1), timeout_s=0) is None
    assert calls == [1]
