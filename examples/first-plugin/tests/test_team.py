import os

from twisted.trial import unittest
from twistgw.testing import ChainTester

import twistgw_team

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "example")  # trial runs in _trial_temp/


class TeamTests(unittest.TestCase):  # trial's TestCase: trial and pytest both run it
    def setUp(self):
        self.tester = ChainTester.from_directory(EXAMPLE, [("team", twistgw_team)])

    async def test_a_listed_team_is_admitted(self):
        ok = await self.tester.request("GET", "http://any/reports", headers={"X-Team": "audit"})
        self.assertEqual((ok.status, ok.body), (200, b"reports\n"))

    async def test_another_team_is_refused(self):
        no = await self.tester.request("GET", "http://any/reports", headers={"X-Team": "sales"})
        self.assertEqual((no.status, no.decided_by), (403, "team"))
