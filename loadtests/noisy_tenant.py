"""Noisy neighbour: a victim tenant with steady paced turns, and an aggressor tenant flooding
shared inference with long generations and no think time during the burst phase.

Phases (--baseline-s, --burst-s, --recovery-s): baseline, burst, recovery. Every user is
spawned at the start (--victim-users and --aggressor-users exactly, by weight); aggressors stay
idle outside the burst. Each phase's start is recorded in phases.jsonl.
"""

from locust import LoadTestShape, constant_pacing, events, task

from drillbook.loadkit import AgentClientUser, PhasedShape, elapsed, noisy_phase


class VictimUser(AgentClientUser):
    tenant_option = "victim_tenant"
    wait_time = constant_pacing(1.0)

    @task
    def turn(self) -> None:
        self.run_turn(max_tokens=self.environment.parsed_options.max_tokens, name="turn victim")


class AggressorUser(AgentClientUser):
    tenant_option = "aggressor_tenant"

    def wait_time(self) -> float:
        return 0 if noisy_phase(self.environment.parsed_options, elapsed()) == "burst" else 0.1

    @task
    def flood(self) -> None:
        if noisy_phase(self.environment.parsed_options, elapsed()) == "burst":
            self.run_turn(max_tokens=self.environment.parsed_options.aggressor_tokens, name="turn aggressor")


@events.init.add_listener
def _weights(environment, **_):
    options = environment.parsed_options
    if options is not None:
        VictimUser.weight = max(options.victim_users, 1)
        AggressorUser.weight = max(options.aggressor_users, 1)


class BaselineBurstRecovery(PhasedShape, LoadTestShape):
    def tick(self):
        options = self.runner.environment.parsed_options
        phase = noisy_phase(options, self.get_run_time())
        self.enter_phase(phase)
        if phase == "done":
            return None
        users = options.victim_users + options.aggressor_users
        return users, users * 10
