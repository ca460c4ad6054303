"""A small fixed English corpus: plain expository prose, shipped in the repo.

Probing a pretrained language model (the Frequency Entropy real-model
preset, `jaxlab/configs/frequency_entropy.py:smollm2`) needs ordinary text
the model reads well, on a machine that downloads nothing. These passages
were written for this repository (no copyrighted source; free to use), one
topic each, in the register of an encyclopedia or a school book, so that
they are fluent English without being text the model is likely to have
memorised verbatim. Each passage is a few hundred words (about 280-330
tokens of the SmolLM2 tokenizer).

    from jaxlab.data import prose
    texts = prose.passages()            # tuple of str, fixed order
    ids = prose.token_windows(tok, texts[:8], length=256)   # [8, 256]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

PASSAGES: tuple[str, ...] = (
    # 0. the water cycle
    "Water on Earth moves through a cycle that has no beginning and no end. "
    "Heat from the sun warms the surface of oceans, lakes and rivers, and "
    "some of that water turns into vapour and rises into the air. Plants add "
    "more vapour through their leaves, a process called transpiration. As "
    "the warm, moist air climbs higher, it cools, and the vapour condenses "
    "on tiny particles of dust and salt to form the droplets that make up "
    "clouds. When the droplets grow large enough, they fall back to the "
    "ground as rain, or as snow and hail when the air is cold. Some of this "
    "water runs off the land into streams, which join to form rivers that "
    "carry it back to the sea. Some of it soaks into the soil and slowly "
    "moves downward until it reaches layers of rock that hold water like a "
    "sponge. These underground stores, called aquifers, can keep water for "
    "thousands of years before it returns to the surface through springs or "
    "wells. In cold regions, snow piles up year after year and is pressed "
    "into ice, forming glaciers that may hold water for even longer. The "
    "total amount of water on the planet changes very little over time, but "
    "where it is found changes all the time. Farmers depend on this cycle "
    "for their crops, cities depend on it for drinking water, and every "
    "living thing depends on it in some way. Scientists study the cycle "
    "closely, because a warmer climate puts more vapour into the air, which "
    "can lead to heavier storms in some places and longer droughts in "
    "others. Understanding how water moves helps people plan for floods, "
    "protect clean water, and share it fairly between neighbours who live "
    "along the same river.",
    # 1. lighthouses
    "For centuries, sailors approaching a rocky coast at night faced a "
    "simple and deadly problem: they could not see the land until it was "
    "too late. The first answer was a fire lit on a hill or a tall tower, "
    "and the most famous early example stood at the harbour of Alexandria "
    "in Egypt more than two thousand years ago. Later towers burned wood, "
    "coal or candles, but their light was weak and often hidden by smoke. "
    "Great progress came in the nineteenth century, when a French engineer "
    "named Augustin Fresnel designed a lens made of many rings of glass. "
    "Each ring bent the light a little, so that together they gathered the "
    "glow of a single lamp into a strong beam that could be seen more than "
    "twenty miles away. To help sailors tell one lighthouse from another, "
    "each station was given its own pattern. Some lights flashed once every "
    "few seconds, some flashed in groups, and some showed a steady beam with "
    "a coloured sector that warned ships away from a dangerous reef. The "
    "keepers who tended these lights lived hard and lonely lives. They "
    "climbed the stairs many times each night to wind the clockwork that "
    "turned the lens, trim the wicks, and polish the glass so that no soot "
    "would dim the beam. In storms they stayed awake until morning. Today "
    "most lighthouses run by themselves, powered by electricity and "
    "watched from far away, and satellite navigation tells a captain where "
    "the ship is at every moment. Yet many towers still shine, both as a "
    "backup for modern systems and as a reminder of the people who once "
    "kept them burning through the long winter nights.",
    # 2. bread
    "Bread is one of the oldest prepared foods, and its basic recipe has "
    "changed surprisingly little over thousands of years. Flour, water, salt "
    "and yeast are all that a simple loaf needs. When flour made from wheat "
    "is mixed with water, two proteins in the grain join together to form "
    "gluten, a stretchy network that gives the dough its strength. Kneading "
    "the dough makes this network longer and more elastic. The yeast, a "
    "tiny living fungus, feeds on the sugars in the flour and releases "
    "bubbles of carbon dioxide gas. Because the gluten is elastic, it traps "
    "the gas, and the dough slowly rises, often doubling in size over an "
    "hour or two in a warm kitchen. After the dough has risen, the baker "
    "shapes it into a loaf, lets it rise once more, and places it in a hot "
    "oven. In the first minutes of baking, the gas expands quickly and the "
    "loaf grows even taller, a stage bakers call oven spring. Then the heat "
    "sets the structure, the water inside turns partly to steam, and the "
    "outside dries and browns into a crust. The brown colour and much of "
    "the flavour come from reactions between sugars and proteins at high "
    "temperature. Before commercial yeast was sold, bakers kept a piece of "
    "old dough, or a starter, which held wild yeast and bacteria from the "
    "air. Bread made this way, known as sourdough, has a slightly sour "
    "taste because the bacteria produce acids. Many families still keep a "
    "starter alive for years, feeding it with fresh flour and water, and "
    "pass it on to friends so that the same living culture can raise loaves "
    "in many different homes.",
    # 3. honeybees
    "A honeybee colony works almost like a single living creature made of "
    "many thousands of small parts. At its centre is the queen, the only "
    "female in the hive that lays eggs, sometimes more than a thousand in a "
    "single day during summer. Most of the other bees are workers, females "
    "that do not lay eggs but do nearly every other job. Young workers stay "
    "inside the hive, where they clean the cells, feed the growing larvae "
    "and build new comb from wax that they produce in their own bodies. As "
    "they grow older, they guard the entrance, and finally they fly out to "
    "collect nectar, pollen and water. Male bees, called drones, have only "
    "one task, which is to mate with a queen from another colony. When a "
    "worker finds a rich patch of flowers, she returns to the hive and "
    "performs a dance on the comb. The direction of her dance shows the "
    "other bees the angle of the flowers relative to the sun, and the "
    "length of the dance tells them how far away the flowers are. Nectar "
    "carried back to the hive is passed from bee to bee and placed in wax "
    "cells, where the workers fan it with their wings until most of the "
    "water evaporates and it thickens into honey. The honey is then sealed "
    "with a cap of wax and stored as food for the winter, when no flowers "
    "bloom. While gathering food, bees carry pollen from one flower to the "
    "next, which allows many plants to produce fruit and seeds. For this "
    "reason, farmers who grow apples, almonds and many other crops rely on "
    "bees, and the health of bee colonies has become a serious concern.",
    # 4. the printing press
    "Before the middle of the fifteenth century, almost every book in "
    "Europe was copied by hand. A skilled scribe might spend months on a "
    "single volume, so books were rare and expensive, and only churches, "
    "universities and wealthy families owned more than a few. Around the "
    "year 1450, a goldsmith in the German city of Mainz named Johannes "
    "Gutenberg brought together several ideas that changed this. He cast "
    "small metal letters, each one a separate piece, which could be "
    "arranged into lines and pages, inked, and pressed onto paper. After "
    "printing, the letters could be taken apart and used again for the next "
    "page. He also developed an oil based ink that stuck well to metal and "
    "adapted a screw press, similar to the ones used for making wine, to "
    "push the paper evenly against the type. With this system, a small "
    "workshop could produce hundreds of identical copies of a book in the "
    "time a scribe needed to make one. Printing spread quickly. Within fifty "
    "years, presses were working in more than two hundred cities, and "
    "millions of books had been printed. Because books became cheaper, more "
    "people learned to read, and new ideas could travel far beyond the town "
    "where they were written. Scholars could compare exact copies of the "
    "same text, which made it easier to find and correct mistakes. "
    "Pamphlets and newspapers followed, carrying news and arguments to a "
    "wide public. Many historians believe that the printing press played an "
    "important part in the great religious, scientific and political "
    "changes of the centuries that followed.",
    # 5. volcanoes
    "Deep beneath the surface of the Earth, the rock is so hot that in some "
    "places it melts into a thick liquid called magma. Because magma is "
    "lighter than the solid rock around it, it slowly rises, collecting in "
    "chambers a few miles below the ground. A volcano forms where this "
    "molten rock finds a path to the surface. When it erupts, the magma is "
    "called lava, and it can flow down the slopes like a glowing river or "
    "burst into the air as ash and broken stone. The kind of eruption "
    "depends mostly on how sticky the magma is and how much gas it holds. "
    "Runny magma, common in places such as Hawaii, lets gas escape easily, "
    "so the lava pours out gently and builds wide, gently sloping mountains. "
    "Thick magma traps its gas until the pressure becomes enormous, and "
    "then it explodes violently, throwing ash high into the sky. Most "
    "volcanoes are found along the edges of the great plates that make up "
    "the outer shell of the planet. Where one plate slides beneath another, "
    "the sinking rock releases water that helps the rock above it melt. "
    "Where plates pull apart, as along the middle of the Atlantic Ocean, "
    "magma rises to fill the gap and forms new sea floor. Eruptions can be "
    "destructive, burying towns and changing the weather for a year or "
    "more when ash blocks sunlight. Yet volcanoes also create new land, and "
    "the soil formed from old lava is often very rich, which is why farms "
    "and villages are found on the slopes of many active mountains. "
    "Scientists watch them closely, measuring small earthquakes and gases "
    "to warn people before an eruption begins.",
    # 6. railways
    "In the early years of the nineteenth century, travel over land was "
    "slow and uncomfortable. A journey between two large cities could take "
    "several days by horse and coach over muddy roads. The steam railway "
    "changed that within a single lifetime. Engineers had already used "
    "steam engines to pump water out of mines, and some mines used wagons "
    "pulled along rails by horses. The idea of putting an engine on wheels "
    "and letting it pull the wagons itself was tested in Britain, and in "
    "1830 the first railway built to carry passengers between two cities on "
    "a regular timetable opened between Liverpool and Manchester. It was a "
    "great success, and railways soon spread across Europe and North "
    "America. Building them required enormous effort. Workers dug cuttings "
    "through hills, raised long embankments across valleys, and bored "
    "tunnels through mountains, often with little more than picks, shovels "
    "and gunpowder. Bridges of iron and later steel carried the lines over "
    "wide rivers. The effects on daily life were dramatic. Fresh food could "
    "reach city markets before it spoiled, factories could send their goods "
    "to distant customers, and ordinary families could visit the seaside "
    "for a day. Towns that were on the line grew quickly, while some that "
    "were bypassed declined. Railways even changed the way people measured "
    "time. Each town had once kept its own local time based on the sun, but "
    "timetables needed a single standard, and so the railway companies "
    "introduced standard time zones, which the rest of society soon "
    "adopted as well.",
    # 7. the heart
    "The human heart is a muscle about the size of a closed fist, and it "
    "beats roughly one hundred thousand times every day without ever "
    "stopping to rest. Its job is to keep blood moving through the body, "
    "carrying oxygen and nutrients to every cell and taking away waste. The "
    "heart has four chambers. The two upper chambers, called atria, receive "
    "blood, and the two lower chambers, called ventricles, pump it out. "
    "Blood that has given up its oxygen returns from the body to the right "
    "side of the heart, which sends it to the lungs. There it releases "
    "carbon dioxide and picks up fresh oxygen before flowing back to the "
    "left side of the heart. The left ventricle, the strongest chamber, "
    "then pushes this oxygen rich blood out through the largest artery and "
    "on to the rest of the body. Valves between the chambers act like "
    "one-way doors, closing after each beat so that the blood cannot flow "
    "backward. The sound a doctor hears through a stethoscope is the noise "
    "of these valves snapping shut. Each beat begins with a small electrical "
    "signal that starts in a cluster of special cells in the wall of the "
    "right atrium, which serves as a natural pacemaker. The signal spreads "
    "across the heart in a careful order, so that the upper chambers "
    "squeeze first and the lower chambers follow a fraction of a second "
    "later. Regular exercise, a balanced diet and not smoking all help to "
    "keep the heart healthy. When the heart is damaged, modern medicine can "
    "often repair it with medicines, surgery, or small devices that help "
    "control its rhythm.",
    # 8. chess
    "Chess is played on a square board of sixty-four squares by two "
    "players, each of whom begins with sixteen pieces. The goal is to "
    "attack the opposing king so that it cannot escape capture, a position "
    "called checkmate. The game is believed to have begun in India around "
    "the sixth century, where an early form represented the divisions of an "
    "army: infantry, cavalry, elephants and chariots. From India it travelled "
    "to Persia, and from there it spread with traders and travellers "
    "across the Arab world and into Europe. Over the centuries the rules "
    "changed. The piece that is now the queen was once a weak adviser that "
    "could move only one square diagonally, but in Spain toward the end of "
    "the fifteenth century it became the most powerful piece on the board, "
    "which made the game much faster and more exciting. Clubs and "
    "tournaments grew in popularity in the nineteenth century, and the "
    "first official world championship match was held in 1886. Players "
    "studied the opening moves carefully and wrote books about the best "
    "plans and traps. In the twentieth century, chess became a field of "
    "research for early computer scientists, who saw it as a test of "
    "whether machines could think. For decades the strongest human players "
    "defeated the best programs, but in 1997 a computer won a full match "
    "against the reigning world champion. Today programs are far stronger "
    "than any person, and players use them to prepare and to study their "
    "mistakes. Even so, millions of people around the world still enjoy "
    "the game for its own sake, playing in parks, in schools and online.",
    # 9. coral reefs
    "Coral reefs look like colourful gardens of rock, but they are built "
    "by living animals. Each coral is a colony of tiny creatures called "
    "polyps, soft bodied relatives of jellyfish, and each polyp builds a "
    "small cup of limestone around itself. Over many generations these "
    "cups pile up into the huge structures we call reefs, some of which "
    "have been growing for thousands of years. Most reef building corals "
    "live in warm, shallow, clear water, because they depend on a "
    "partnership with microscopic algae that live inside their tissues. "
    "The algae use sunlight to make food, and they share much of it with "
    "the coral. In return, the coral gives the algae shelter and the "
    "nutrients they need. The algae also give many corals their bright "
    "colours. Although reefs cover only a tiny part of the ocean floor, "
    "they are home to about a quarter of all known marine species. Fish, "
    "crabs, sea stars, turtles and countless other animals find food and "
    "hiding places among the branches and caves. Reefs also protect coasts "
    "by breaking the force of waves during storms, and they support the "
    "fishing and tourism on which many island communities depend. Today "
    "reefs face serious threats. When the water becomes too warm for too "
    "long, corals expel their algae and turn white, a process known as "
    "bleaching. If the water cools soon enough they can recover, but if "
    "not, they starve and die. Pollution, overfishing and damage from "
    "boats add further stress. Scientists and local groups are working to "
    "protect reefs and even to grow young corals in nurseries and plant "
    "them back on damaged reefs.",
    # 10. navigation
    "Long before satellites, travellers found their way across deserts and "
    "oceans by reading the sky and the land around them. Sailors in the "
    "Pacific watched the rising and setting points of certain stars, the "
    "shape of the waves, and the flight of birds to find islands hundreds "
    "of miles apart. In the northern half of the world, the pole star "
    "stays almost fixed in the sky, and its height above the horizon tells "
    "an observer how far north they are. The magnetic compass, first used "
    "in China and later carried to Europe, allowed ships to hold a steady "
    "course even when clouds hid the stars. Finding one's position from "
    "east to west was much harder. Because the Earth turns, a difference "
    "in longitude is the same as a difference in local time, so a sailor "
    "who knew the exact time at the home port could compare it with the "
    "time of noon on the ship and work out how far east or west the ship "
    "had travelled. The difficulty was building a clock that kept accurate "
    "time on a rolling ship through heat, cold and damp. In the eighteenth "
    "century an English carpenter and clockmaker named John Harrison spent "
    "decades solving this problem, and his sea clocks finally made it "
    "possible to fix a ship's position with confidence. Maps improved as "
    "well, as surveyors measured the land with chains, telescopes and "
    "careful arithmetic. Today a small receiver in a telephone can find its "
    "position within a few metres by timing radio signals from satellites, "
    "but the basic idea, comparing time and distance, is the same one "
    "the old navigators used.",
    # 11. tea
    "Tea is made from the leaves of a single kind of evergreen shrub, yet "
    "it is prepared in so many ways that it can taste completely "
    "different from one country to the next. According to legend, it was "
    "discovered in China when a few leaves blew into a pot of boiling "
    "water, and for many centuries it was drunk there both as a medicine "
    "and as a pleasure. The main types of tea all come from the same plant "
    "and differ mostly in how the leaves are treated after they are picked. "
    "For green tea, the leaves are heated soon after picking, which stops "
    "them from changing and keeps their fresh, grassy flavour. For black "
    "tea, the leaves are rolled and left in the air, where they darken and "
    "develop a stronger, richer taste before they are dried. Oolong tea "
    "lies between the two. Tea reached Europe in the seventeenth century, "
    "carried by Dutch and Portuguese traders, and it became especially "
    "popular in Britain, where the custom of afternoon tea developed. The "
    "demand for tea shaped world trade and even politics, and large "
    "plantations were later established in India, Sri Lanka and East "
    "Africa. Growing good tea requires a warm climate, plenty of rain and "
    "often the cool air of hills or mountains. The best leaves are still "
    "picked by hand, usually just the top two leaves and a bud from each "
    "branch. Around the world, people add milk, sugar, lemon, spices or "
    "even butter and salt, and in many homes offering a cup of tea to a "
    "visitor is the first sign of welcome.",
    # 12. the moon and tides
    "The Moon is the Earth's only natural satellite, and it is large "
    "enough to have a strong effect on our planet. It circles the Earth "
    "about once every twenty-seven days, and because it turns on its axis "
    "in exactly the same time, it always shows us the same face. The Moon "
    "gives off no light of its own. What we see is sunlight reflected from "
    "its grey, dusty surface, and as the Moon moves around the Earth, we "
    "see different amounts of its sunlit half. This is why it seems to "
    "change shape, from a thin crescent to a full disc and back again, in "
    "a cycle of about twenty-nine and a half days. The Moon's gravity pulls "
    "on the oceans, raising a bulge of water on the side of the Earth that "
    "faces it. A second bulge forms on the opposite side, where the pull is "
    "weakest. As the Earth turns beneath these bulges, most coasts see two "
    "high tides and two low tides each day. The Sun also pulls on the "
    "oceans, though less strongly because it is so far away. When the Sun, "
    "the Moon and the Earth are lined up, at new moon and full moon, their "
    "pulls add together and the tides are especially high and low. When "
    "they are at right angles, the tides are gentler. Tides shape the lives "
    "of countless creatures that live along the shore, and they matter to "
    "people as well, since ships must often wait for high water to enter a "
    "harbour. Over very long periods, the tides are even slowing the "
    "Earth's rotation, making each day a tiny bit longer.",
    # 13. a short story: the clock
    "When Anna was nine, her grandfather let her help him repair the old "
    "clock that stood in the corner of his workshop. It had stopped years "
    "before she was born, and its tall wooden case was covered with dust. "
    "Her grandfather opened the small door in the front and showed her the "
    "pendulum, a long brass rod with a heavy disc at the bottom. Behind the "
    "face, he explained, were wheels with tiny teeth that fitted together, "
    "so that each swing of the pendulum let one tooth slip past and moved "
    "the hands forward by a tiny amount. Together they took the movement "
    "out of its case and laid it on a cloth on the bench. Anna's job was "
    "to clean each wheel with a soft brush while her grandfather looked at "
    "them through a magnifying glass. Most were fine, but one small wheel "
    "had a bent tooth. He heated the metal gently, straightened the tooth "
    "with a pair of fine pliers and filed it until it matched the others. "
    "Then they put everything back, one piece at a time, and he showed her "
    "how to add a single drop of oil to each pivot, never more. When the "
    "movement was back in its case, he lifted the heavy weights onto their "
    "chains and gave the pendulum a gentle push. For a moment nothing "
    "happened. Then the clock began to tick, slowly and steadily, and the "
    "sound filled the quiet workshop. Anna laughed out loud. Many years "
    "later, when the clock stood in her own hallway, she still wound it "
    "every Sunday morning, just as he had taught her.",
)


def passages() -> tuple[str, ...]:
  """The corpus, in its fixed order (one topic per passage)."""
  return PASSAGES


def token_windows(tok: Any, texts: Sequence[str], length: int, *,
                  stream: bool = False,
                  max_windows: int | None = None) -> np.ndarray:
  """Token-id windows `[n, length]` of `texts` under tokenizer `tok`.

  Args:
    tok: anything with `encode(text) -> list[int]` (no special tokens are
      added, so every window is ordinary text from position 0).
    texts: the passages.
    length: tokens per window.
    stream: False: the first `length` tokens of each passage, one window
      each (a passage shorter than `length` is an error); True: the
      passages joined by a blank line into one stream cut into as many
      whole windows as fit.
    max_windows: keep at most this many windows (the first ones).
  """
  if length < 2:
    raise ValueError(f"token_windows needs length >= 2, got {length}")
  if stream:
    ids = np.asarray(tok.encode("\n\n".join(texts)), np.int32)
    n = len(ids) // length
    if n < 1:
      raise ValueError(f"the {len(texts)} passages give {len(ids)} tokens, "
                       f"fewer than one window of {length}")
    return ids[:n * length].reshape(n, length)[:max_windows]
  rows = []
  for i, t in enumerate(texts):
    ids = np.asarray(tok.encode(t), np.int32)
    if len(ids) < length:
      raise ValueError(f"passage {i} has {len(ids)} tokens, fewer than the "
                       f"window length {length}")
    rows.append(ids[:length])
  return np.stack(rows)[:max_windows]
