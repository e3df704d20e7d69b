"""The episode driver on fake environments: no server, no engine."""

from __future__ import annotations

from harbor_openenv.client import driver
from harbor_openenv.models import HarborAction, HarborObservation


def test_driver_walks_steps_until_done():
    """The episode driver on a fake three-step environment: the policy acts before every
    evaluate, and the episode's reward is the one that ends it."""

    class ThreeSteps:
        def __init__(self) -> None:
            self.log: list[str] = []
            self.step_index = 0

        def reset(self, task_id: str) -> HarborObservation:
            self.log.append(f"reset {task_id}")
            return HarborObservation(info={"step": {"name": "a", "index": 0, "count": 3}})

        def step(self, action) -> HarborObservation:
            self.log.append(action.action_type)
            if action.action_type != "evaluate":
                return HarborObservation(action_type=action.action_type, exit_code=0)
            self.step_index += 1
            if self.step_index == 3:
                return HarborObservation(action_type="evaluate", done=True, reward=1.0)
            name = "abc"[self.step_index]
            return HarborObservation(action_type="evaluate", info={"step": {"name": name}})

    env = ThreeSteps()
    run = driver.run_episode(env, "t", driver.oracle("tok"), "tok")
    assert (run.reward, run.done, run.evaluates, run.error) == (1.0, True, 3, None)
    assert env.log == ["reset t", *["solve", "evaluate"] * 3]
    env = ThreeSteps()
    run = driver.run_episode(env, "t", driver.nop, "tok", keep=True)
    assert env.log == ["reset t", "evaluate", "evaluate", "evaluate"]
    assert len(run.observations) == 4 and run.reward == 1.0


class Recorder:
    """One step; ``errors`` maps an action type to the error its observation carries."""

    def __init__(self, errors: dict[str, str] | None = None, refuse: str | None = None) -> None:
        self.log: list[str] = []
        self.errors = errors or {}
        self.refuse = refuse

    def reset(self, task_id: str) -> HarborObservation:
        self.log.append("reset")
        return HarborObservation(error=self.refuse, done=self.refuse is not None)

    def step(self, action: HarborAction) -> HarborObservation:
        self.log.append(action.action_type)
        error = self.errors.get(action.action_type)
        if action.action_type == "evaluate":
            return HarborObservation(action_type="evaluate", done=True, reward=0.0, error=error)
        return HarborObservation(action_type=action.action_type, error=error)


def test_refused_reset_and_stop_on_error():
    run = driver.run_episode(Recorder(refuse="text-only"), "t", driver.nop, "tok")
    assert (run.refused, run.done, run.error, run.reward) == (True, True, "reset: text-only", None)
    env = Recorder(errors={"solve": "no solution"})
    run = driver.run_episode(env, "t", driver.oracle("tok"), "tok")
    assert env.log == ["reset", "solve", "evaluate"] and run.reward == 0.0
    assert run.error == "solve: no solution" and run.last is not None and run.last.done
    env = Recorder(errors={"solve": "no solution"})
    run = driver.run_episode(env, "t", driver.oracle("tok"), "tok", stop_on_error=True)
    assert env.log == ["reset", "solve"] and (run.reward, run.done) == (None, False)
    assert run.error == "solve: no solution"


def test_oracle_for_the_first_steps_only():
    first = HarborObservation(info={"step": {"name": "a", "index": 0, "count": 2}})
    second = HarborObservation(info={"step": {"name": "b", "index": 1, "count": 2}})
    policy = driver.oracle("tok", steps=1)
    assert [a.action_type for a in policy(first)] == ["solve"] and policy(second) == ()
    assert driver.oracle("tok", steps=0)(HarborObservation()) == ()
    assert len(driver.oracle("tok")(second)) == 1


def test_client_env_takes_each_results_observation():
    class Result:
        def __init__(self, observation: HarborObservation) -> None:
            self.observation = observation

    class Client:
        def reset(self, **kwargs: object) -> Result:
            return Result(HarborObservation(instruction=str(kwargs)))

        def step(self, action: HarborAction) -> Result:
            return Result(HarborObservation(action_type=action.action_type, done=True, reward=1))

    env = driver.ClientEnv(Client())  # type: ignore[arg-type]
    run = driver.run_episode(env, "t", driver.nop, "tok", keep=True)
    assert run.observations[0].instruction == "{'task_id': 't'}"
    assert (run.reward, run.done, run.evaluates) == (1.0, True, 1)
