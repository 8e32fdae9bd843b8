"""One metadata long poll per process (actors/metadata_follower.py): the coordinators a shard hosts
share it, so a metadata change costs the process one image however many of them follow it. A
stand-in controller answers the long poll from a version counter (no Ray)."""
import asyncio
from dataclasses import dataclass

from actors import metadata_follower


@dataclass
class Image:
    version: int


class Controller:
    """wait_for_metadata as the controller answers it: at once if newer than known, else at a change
    or the timeout."""

    def __init__(self, voters=(1, 2, 3)):
        self.voters = voters
        self.version = 5
        self.asked = []
        self.changed = asyncio.Event()
        controller = self

        class _Wait:
            @staticmethod
            async def remote(known_version, timeout_s):
                controller.asked.append(known_version)
                if controller.version <= known_version:
                    try:
                        await asyncio.wait_for(controller.changed.wait(), timeout_s)
                    except asyncio.TimeoutError:
                        pass
                return Image(controller.version)

        self.wait_for_metadata = _Wait

    def change(self):
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()


def test_coordinators_of_one_process_share_one_long_poll():
    async def run():
        controller = Controller()
        copies = [Controller(controller.voters) for _ in range(3)]  # each hosted spec unpickles its own copy
        follower = metadata_follower.follower(controller)
        assert all(metadata_follower.follower(c) is follower for c in copies)
        firsts = await asyncio.gather(*(follower.current() for _ in range(5)))
        assert [i.version for i in firsts] == [5] * 5
        waiting = [asyncio.ensure_future(follower.other_than(5, 10)) for _ in range(20)]
        await asyncio.sleep(0.05)
        controller.change()
        images = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert {i.version for i in images} == {6}
        assert len(controller.asked) <= 3  # the first ask and the long polls, not one per coordinator
        follower.task.cancel()

    asyncio.run(run())


def test_without_a_change_a_waiter_gets_the_current_image_at_its_timeout():
    async def run():
        follower = metadata_follower.follower(Controller())
        await follower.current()
        image = await asyncio.wait_for(follower.other_than(5, 0.1), 5)
        assert image.version == 5
        follower.task.cancel()

    asyncio.run(run())


def test_an_image_asked_for_elsewhere_is_taken_only_if_newer():
    async def run():
        follower = metadata_follower.follower(Controller())
        await follower.current()
        follower.offer(Image(9))  # (a coordinator's own ensure_internal_topic answer)
        assert follower.image.version == 9
        follower.offer(Image(7))
        assert follower.image.version == 9  # no waiter is handed an older image after a newer one
        follower.task.cancel()

    asyncio.run(run())


def test_each_controller_has_its_own_follower():
    async def run():
        assert metadata_follower.follower(Controller((1, 2, 3))) is not metadata_follower.follower(Controller((4,)))

    asyncio.run(run())
