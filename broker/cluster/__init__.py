"""The cluster over the metadata store: membership, the controller, placement, topics and
the views of the image handed to the rooms above."""
